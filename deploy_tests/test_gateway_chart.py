"""`gateway.enabled`: the RLHF gateway's objects render valid, select only the gateway's pods,
grant the gateway nothing but token reviews and impersonation, and start it with the
settings file the gateway itself validates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_tool import CHART, Helm, Manifest, by_kind, parse_manifests

from rlhf_gateway.settings import GatewaySettings

SUBSTRATE_VALUES = Path(__file__).resolve().parents[1] / "e2e" / "local" / "gateway-values.yaml"
CATALOG = [
    {
        "id": "tiny-llama-random",
        "source": {
            "randomInit": {
                "hiddenSize": 64,
                "numLayers": 2,
                "numHeads": 2,
                "intermediateSize": 128,
                "vocabSize": 512,
            }
        },
        "spec": {"placement": {"device": "cpu"}},
    }
]
VALUES: dict[str, dict[str, Any]] = {
    "pvc-files-ingress": {
        "gateway": {
            "enabled": True,
            "filesClaim": "rlhf-files",
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "host": "rlhf.example.com",
                "tls": [{"hosts": ["rlhf.example.com"], "secretName": "rlhf-tls"}],
            },
            "networkPolicy": {"from": [{"namespaceSelector": {"matchLabels": {"ingress": "yes"}}}]},
            "config": {"catalog": CATALOG, "files": {"uri": "pvc://rlhf-files/uploads"}},
        }
    },
    "s3-files-one-replica": {
        "gateway": {
            "enabled": True,
            "replicaCount": 1,
            "config": {"files": {"uri": "s3://rlhf-files/uploads"}},
            "extraEnv": [{"name": "AWS_REGION", "value": "eu-west-1"}],
        }
    },
    # The local substrate's (`e2e/local/up.sh --set gateway.enabled=true`), with the endpoint
    # its S3 store gets at start-up.
    "local-substrate": {
        **yaml.safe_load(SUBSTRATE_VALUES.read_text()),
        "gateway": {
            **yaml.safe_load(SUBSTRATE_VALUES.read_text())["gateway"],
            "enabled": True,
        },
    },
}


def _gateway(objs: list[Manifest]) -> list[Manifest]:
    return [o for o in objs if "gateway" in o["metadata"]["name"]]


@pytest.fixture(params=list(VALUES))
def rendered(request: pytest.FixtureRequest, helm: Helm, offline_chart: Path) -> list[Manifest]:
    return parse_manifests(helm.template(offline_chart, VALUES[request.param]))


def test_off_by_default(helm: Helm, offline_chart: Path) -> None:
    assert _gateway(parse_manifests(helm.template(offline_chart, {}))) == []


def test_objects_validate(rendered: list[Manifest], kube_validate: Any) -> None:
    kinds = sorted(o["kind"] for o in _gateway(rendered))
    assert {"Deployment", "Service", "ServiceAccount", "ConfigMap", "ClusterRole"} <= set(kinds)
    for obj in _gateway(rendered):
        kube_validate(obj)


def test_the_gateway_pods_and_only_they_are_selected(rendered: list[Manifest]) -> None:
    deployments = {d["metadata"]["name"]: d for d in by_kind(rendered, "Deployment")}
    gateway = next(d for name, d in deployments.items() if name.endswith("-gateway"))
    operator = next(d for name, d in deployments.items() if not name.endswith("-gateway"))
    pod_labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["app.kubernetes.io/component"] == "gateway"
    for selector in (
        operator["spec"]["selector"]["matchLabels"],
        *(
            p["spec"]["selector"]["matchLabels"]
            for p in by_kind(rendered, "PodDisruptionBudget")
            if not p["metadata"]["name"].endswith("-gateway")
        ),
    ):
        assert not selector.items() <= pod_labels.items()  # the operator's never match it
    assert gateway["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:3] == [
        "rlhf-gateway",
        "--config",
        "/etc/rlhf-gateway/gateway.yaml",
    ]
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    for service in by_kind(rendered, "Service"):
        if service["metadata"]["name"].endswith("-gateway"):
            assert service["spec"]["selector"].items() <= pod_labels.items()


def test_the_settings_file_is_what_the_gateway_reads(rendered: list[Manifest]) -> None:
    config = next(
        c for c in by_kind(rendered, "ConfigMap") if c["metadata"]["name"].endswith("-gateway")
    )
    settings = GatewaySettings.model_validate(yaml.safe_load(config["data"]["gateway.yaml"]))
    assert settings.files.uri.split("://")[0] in ("pvc", "s3")


def test_the_gateway_may_only_review_tokens_and_impersonate(rendered: list[Manifest]) -> None:
    roles = {r["metadata"]["name"]: r for r in by_kind(rendered, "ClusterRole")}
    gateway = next(r for name, r in roles.items() if name.endswith("-gateway"))
    assert gateway["rules"] == yaml.safe_load((CHART / "files" / "gateway-rules.yaml").read_text())
    granted = {
        (g, r, v)
        for rule in gateway["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert {v for _, _, v in granted} == {"create", "impersonate"}
    assert {r for _, r, v in granted if v == "create"} == {"tokenreviews"}
    tenant = next(r for name, r in roles.items() if name.endswith("-gateway-tenant"))
    assert tenant["rules"] == yaml.safe_load(
        (CHART / "files" / "gateway-tenant-rules.yaml").read_text()
    )


def test_the_kustomize_overlay_renders_the_charts_gateway(
    helm: Helm, offline_chart: Path, kube_validate: Any
) -> None:
    from helm_tool import REPO, kubectl_kustomize

    overlay = REPO / "manifests" / "overlays" / "gateway"
    settings = yaml.safe_load((overlay / "gateway.yaml").read_text())
    values = {"gateway": {"enabled": True, "filesClaim": "rlhf-files", "config": settings}}
    charted = _gateway(
        parse_manifests(helm.template(offline_chart, values, release="rlhf-operator"))
    )
    kustomized = _gateway(kubectl_kustomize(overlay))
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, kustomized)) == sorted(map(key, charted))
    ours = {key(o): o for o in kustomized}
    for obj in charted:
        mine = ours[key(obj)]
        kube_validate(mine)
        assert mine["metadata"].get("namespace") == obj["metadata"].get("namespace")
        if obj["kind"] == "Deployment":
            pod, chart_pod = mine["spec"]["template"]["spec"], obj["spec"]["template"]["spec"]
            for field in ("command", "ports", "securityContext", "volumeMounts"):
                assert pod["containers"][0][field] == chart_pod["containers"][0][field], field
            assert pod["volumes"] == chart_pod["volumes"]
        elif obj["kind"] == "ConfigMap":
            assert yaml.safe_load(mine["data"]["gateway.yaml"]) == settings
        else:
            for field in ("rules", "spec", "roleRef", "subjects"):
                assert mine.get(field) == obj.get(field), (key(obj), field)


async def test_the_local_substrate_can_install_the_gateway(tmp_path: Path) -> None:
    """`e2e/local/up.sh --set gateway.enabled=true`: every object the chart renders is a kind
    the substrate's API server serves and accepts (its pods then run like the operator's)."""
    from substrate.chart import install, render

    from emulator import run_emulator
    from emulator.harness import project_crds

    values = {
        "gateway.enabled": "true",
        "gateway.ingress.enabled": "true",
        "gateway.ingress.host": "rlhf.local",
        "gateway.config.files.uri": "s3://rlhf-files/uploads",
    }
    async with run_emulator(crds=project_crds(), namespaces=[]) as api:
        install(api, render(values))
        kinds = {
            (o["kind"], o["metadata"]["name"])
            for resource in (
                "apps/v1/deployments",
                "v1/services",
                "policy/v1/poddisruptionbudgets",
                "networking.k8s.io/v1/ingresses",
                "networking.k8s.io/v1/networkpolicies",
            )
            for o in api.list(resource, "rlhf-system")
        }
    assert {
        ("Deployment", "rlhf-operator-gateway"),
        ("Service", "rlhf-operator-gateway"),
        ("PodDisruptionBudget", "rlhf-operator-gateway"),
        ("Ingress", "rlhf-operator-gateway"),
        ("NetworkPolicy", "rlhf-operator-gateway"),
    } <= kinds


def test_notes_say_how_to_add_a_tenant(helm: Helm, offline_chart: Path) -> None:
    values = {"gateway": {"enabled": True, "config": {"files": {"uri": "s3://b-1/f"}}}}
    result = helm.run(
        "install",
        "rlhf",
        str(offline_chart),
        "-n",
        "rlhf-system",
        "--dry-run=client",
        "-f",
        str(helm.values_file(values)),
    )
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "--clusterrole=rlhf-rlhf-operator-gateway-tenant" in notes
    assert "kubectl create token ACCOUNT -n TEAM" in notes


@pytest.mark.parametrize(
    ("gateway", "words"),
    [
        ({"enabled": True}, "gateway.config.files.uri: where uploaded files go"),
        ({"enabled": True, "config": {"files": {"uri": "ftp://x"}}}, '(got "ftp://x")'),
        ({"enabled": True, "config": {"files": {"uri": "pvc://c/p"}}}, "gateway.filesClaim"),
    ],
    ids=["no-uri", "bad-scheme", "pvc-without-claim"],
)
def test_template_refuses_a_gateway_without_a_file_store(
    helm: Helm, offline_chart: Path, gateway: dict[str, Any], words: str
) -> None:
    from helm_tool import CommandFailed

    with pytest.raises(CommandFailed) as caught:
        helm.template(offline_chart, {"gateway": gateway})
    assert words in str(caught.value)


def test_the_substrates_tiny_model_makes_a_valid_reinforcement_job() -> None:
    """The local substrate's catalog entry, with a python grader and a file on its S3 store,
    is an RLHFJob the shared validators accept (the gateway journey's job, offline)."""
    from rlhf_gateway.jobrequest import (
        CreateJobRequest,
        FileRef,
        check_manifest,
        manifest,
        translate,
    )

    config = yaml.safe_load(SUBSTRATE_VALUES.read_text())["gateway"]["config"]
    config["files"]["objectStore"]["endpointUrl"] = "http://198.18.213.1:9000"
    settings = GatewaySettings.model_validate(config)
    (tiny,) = settings.catalog
    assert "tiny" in tiny.id
    grader = {"type": "python", "name": "g", "source": "def grade(sample, item):\n    return 1.0\n"}
    req = CreateJobRequest.model_validate(
        {
            "model": tiny.id,
            "training_file": "file-1",
            "method": {"type": "reinforcement", "reinforcement": {"grader": grader}},
        }
    )
    store = settings.files.object_store
    assert store is not None
    plan = translate(
        req,
        base=tiny,
        actor=tiny.source.to_manifest(),
        training=FileRef("file-1", "s3://rlhf-files/uploads/team-a/file-1.jsonl", "openai"),
        validation=None,
        rl_algorithm=settings.reinforcement_algorithm,
        reward={"models.graderReward.grader": grader},
        object_store=store.to_manifest(),
    )
    doc = manifest("ftjob-1", req, plan.spec, {})
    check_manifest(doc, plan, tiny.id)  # raises the 400 the gateway would answer
    assert plan.spec["objectStore"]["credentialsSecret"]["name"] == "rlhf-files-s3"
    assert plan.spec["placement"]["device"] == "cpu"
