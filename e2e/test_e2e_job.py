"""Offline checks of the e2e job (no cluster needed): the adapted tiny example is a valid
RLHFJob, and what the operator renders for it runs on a CPU-only kind node of the documented
size, with the locally loaded image."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_job import EXAMPLE, NODE_BUDGET, REPO, adapt_for_kind, load_example

# The tiny CPU example is the e2e job; the operator's valid corpus base is a second tiny CPU
# PPO manifest, so the adaptation is exercised even before the example exists.
SOURCES = {
    "tiny-ppo-cpu-example": EXAMPLE,
    "operator-corpus-base": REPO / "operator" / "tests" / "corpus" / "base.yaml",
}
IMAGE = "rlhf-trainer-cpu:e2e"
_UNITS: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}


def _quantity(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", text)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(Decimal(match.group(1)) * _UNITS[match.group(2)])


def _adapted(source: Path) -> dict[str, Any]:
    if not source.exists():
        pytest.skip(f"{source.relative_to(REPO)} does not exist yet (owned by the trainer team)")
    return adapt_for_kind(load_example(source), image=IMAGE, namespace="rlhf-e2e")


def _pods(ray_job: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(replicas, pod spec) of every pod the RayJob starts: head, workers, submitter."""
    cluster = ray_job["spec"]["rayClusterSpec"]
    pods = [(1, cluster["headGroupSpec"]["template"]["spec"])]
    pods += [(g["replicas"], g["template"]["spec"]) for g in cluster.get("workerGroupSpecs", [])]
    submitter = ray_job["spec"].get("submitterPodTemplate")
    if submitter:
        pods.append((1, submitter["spec"]))
    return pods


@pytest.mark.parametrize("source", SOURCES.values(), ids=SOURCES.keys())
def test_adapted_job_is_a_valid_rlhfjob(source: Path) -> None:
    api = pytest.importorskip("rlhf_operator.api.v1alpha1")
    from support.crd_schema import validator_for_crd

    job = _adapted(source)
    api.RLHFJob.model_validate(job)
    crd = yaml.safe_load((REPO / "crds" / "rlhf.dev_rlhfjobs.yaml").read_text())
    assert validator_for_crd(crd, "v1alpha1", strict=True).validate(job) == []
    assert job["spec"]["placement"]["device"] == "cpu"


@pytest.mark.parametrize("source", SOURCES.values(), ids=SOURCES.keys())
def test_rendered_pods_fit_a_cpu_kind_node(source: Path) -> None:
    api = pytest.importorskip("rlhf_operator.api.v1alpha1")
    children = pytest.importorskip("rlhf_operator.builders.children")
    settings = pytest.importorskip("rlhf_operator.settings")
    manifest = _adapted(source)
    manifest["metadata"]["uid"] = "e2e-offline"
    rendered = children.render_children(
        api.RLHFJob.model_validate(manifest),
        settings.OperatorSettings(default_trainer_image="unused:never"),
    )
    cpu = memory = 0.0
    for replicas, pod in _pods(rendered.ray_job):
        for container in pod["containers"]:
            assert container["image"] == IMAGE
            requests = container.get("resources", {}).get("requests", {})
            limits = container.get("resources", {}).get("limits", {})
            assert not any("gpu" in name for name in {**requests, **limits}), container["name"]
            cpu += replicas * _quantity(str(requests.get("cpu", "0")))
            memory += replicas * _quantity(str(requests.get("memory", "0")))
    assert cpu <= NODE_BUDGET["cpu"], f"{cpu} CPUs requested"
    assert memory <= NODE_BUDGET["memory"], f"{memory / 2**30:.1f} GiB requested"
    kinds = [child["kind"] for child in rendered.all]
    assert "PersistentVolumeClaim" in kinds  # the checkpoint volume the e2e suite inspects
