"""The kustomize install (`kubectl apply -k manifests/base`, or the namespaced overlay), rendered
by the kustomize built into kubectl: valid objects, the real CRD, and the same operator pod as the
Helm chart's defaults."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_tool import REPO, Helm, Manifest, by_kind, kubectl_kustomize, one, parse_manifests

from rlhf_operator.settings import OperatorSettings

BASE = REPO / "manifests" / "base"
OVERLAYS = {"base": BASE, "namespaced": REPO / "manifests" / "overlays" / "namespaced"}


@pytest.fixture(scope="module")
def kustomized(tools: Path) -> dict[str, list[Manifest]]:
    return {name: kubectl_kustomize(path) for name, path in OVERLAYS.items()}


@pytest.fixture(scope="module")
def helm_default(helm: Helm, offline_chart: Path) -> list[Manifest]:
    return parse_manifests(helm.template(offline_chart, {}, release="rlhf-operator"))


def _pod(manifests: list[Manifest]) -> dict[str, Any]:
    return dict(one(manifests, "Deployment")["spec"]["template"]["spec"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_valid_kubernetes(
    kustomized: dict[str, list[Manifest]],
    kube_validate: Callable[[dict[str, Any]], None],
    overlay: str,
) -> None:
    kinds = set()
    for obj in kustomized[overlay]:
        kube_validate(obj)
        kinds.add(obj["kind"])
    assert {"CustomResourceDefinition", "ServiceAccount", "Deployment", "Namespace"} <= kinds


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_installs_the_generated_crd_unchanged(
    kustomized: dict[str, list[Manifest]], overlay: str
) -> None:
    crds = [o for o in kustomized[overlay] if o["kind"] == "CustomResourceDefinition"]
    by_name = {crd["metadata"]["name"]: crd for crd in crds}
    assert len(by_name) == len(crds) == 2
    for plural in ("rlhfjobs", "rlhfpipelines"):
        generated = yaml.safe_load((REPO / "crds" / f"rlhf.dev_{plural}.yaml").read_text())
        assert by_name[f"{plural}.rlhf.dev"] == generated


def test_operator_pod_matches_the_helm_chart_defaults(
    kustomized: dict[str, list[Manifest]], helm_default: list[Manifest]
) -> None:
    kustomize_pod, helm_pod = _pod(kustomized["base"]), _pod(helm_default)
    assert kustomize_pod["securityContext"] == helm_pod["securityContext"]
    assert kustomize_pod["volumes"] == helm_pod["volumes"]
    kustomize_container, helm_container = kustomize_pod["containers"][0], helm_pod["containers"][0]
    for field in (
        "command",
        "env",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
        "imagePullPolicy",
        "image",
    ):
        assert kustomize_container[field] == helm_container[field], field
    assert (
        one(kustomized["base"], "Deployment")["spec"]["strategy"]
        == one(helm_default, "Deployment")["spec"]["strategy"]
    )


def test_base_puts_the_operator_in_its_own_namespace(
    kustomized: dict[str, list[Manifest]],
) -> None:
    manifests = kustomized["base"]
    assert [ns["metadata"]["name"] for ns in by_kind(manifests, "Namespace")] == ["rlhf-system"]
    for kind in ("ServiceAccount", "Deployment"):
        assert one(manifests, kind)["metadata"]["namespace"] == "rlhf-system"
    binding = one(manifests, "ClusterRoleBinding")
    assert binding["subjects"][0]["namespace"] == "rlhf-system"


def test_namespaced_overlay_serves_exactly_the_namespaces_it_grants(
    kustomized: dict[str, list[Manifest]],
) -> None:
    manifests = kustomized["namespaced"]
    container = _pod(manifests)["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    served = set(env["RLHF_OPERATOR_NAMESPACES"].split(","))
    assert {role["metadata"]["namespace"] for role in by_kind(manifests, "Role")} == served
    assert {b["metadata"]["namespace"] for b in by_kind(manifests, "RoleBinding")} == served
    for binding in by_kind(manifests, "RoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "rlhf-operator", "namespace": "rlhf-system"}
        ]
    # The patch replaced the value, it did not add a second variable of the same name.
    names = [item["name"] for item in container["env"]]
    assert len(names) == len(set(names))


def test_the_overlay_documented_in_install_md_builds(tmp_path: Path, tools: Path) -> None:
    # docs/install.md shows an overlay that pins both images; build it exactly as written.
    doc = (REPO / "docs" / "install.md").read_text()
    block = doc.split("# my-overlay/kustomization.yaml\n", 1)[1].split("```", 1)[0]
    shutil.copytree(REPO / "manifests", tmp_path / "manifests")
    overlay = tmp_path / "clusters" / "my-overlay"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(block)
    container = _pod(kubectl_kustomize(overlay))["containers"][0]
    assert container["image"] == "registry.example.com/ml/rlhf-operator:0.1.0"
    env = {item["name"]: item["value"] for item in container["env"]}
    assert (
        env["RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE"] == "registry.example.com/ml/rlhf-trainer:0.1.0"
    )


def _example_dirs() -> list[Path]:
    return sorted(p.parent for p in (REPO / "manifests" / "examples").rglob("kustomization.yaml"))


def _config_map_refs(spec: dict[str, Any]) -> list[dict[str, str]]:
    sources = [*spec["data"].get("train", []), *spec["data"].get("eval", [])]
    sources.append(spec["models"].get("rewardFunction") or {})
    return [s["configMapRef"] for s in sources if "configMapRef" in s]


@pytest.mark.parametrize("directory", _example_dirs(), ids=lambda p: p.name)
def test_example_kustomizations_are_jobs_a_cluster_runs(
    tools: Path, directory: Path, tmp_path: Path
) -> None:
    """`kubectl apply -k` of an example creates every ConfigMap its RLHFJobs mount, under the
    name and key the jobs give (kustomize cannot rewrite names inside our CRD), and jobs the
    operator accepts and renders into a RayJob that KubeRay's CRD accepts."""
    from pure.kuberay import rayjob_errors
    from rlhf_operator.render import render_file

    objects = kubectl_kustomize(directory)
    config_maps = {m["metadata"]["name"]: m for m in by_kind(objects, "ConfigMap")}
    jobs = by_kind(objects, "RLHFJob") + by_kind(objects, "RLHFPipeline")
    assert jobs
    every_ref: list[dict[str, str]] = []
    for job in jobs:
        specs = [s["spec"] for s in job["spec"].get("stages", [])] or [job["spec"]]
        refs = [ref for spec in specs for ref in _config_map_refs(spec)]
        every_ref += refs  # a job on builtin data and a fromJob model mounts no ConfigMap
        for ref in refs:
            assert ref["key"] in config_maps[ref["name"]]["data"], ref
            if ref["key"].endswith(".py"):
                code = config_maps[ref["name"]]["data"][ref["key"]]
                compile(code, ref["key"], "exec")  # the reward function is valid Python
    assert every_ref
    rendered_path = tmp_path / "jobs.yaml"
    rendered_path.write_text(yaml.safe_dump_all(jobs))
    settings = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
    for rendered in render_file(rendered_path, settings):
        assert not rendered.problems, rendered.problems
        ray_jobs = [o for o in rendered.objects if o["kind"] == "RayJob"]
        assert ray_jobs  # one per job, and per stage of a pipeline
        for ray_job in ray_jobs:
            assert rayjob_errors(ray_job) == []
