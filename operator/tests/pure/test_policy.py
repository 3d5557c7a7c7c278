"""The platform's policy (Valid=False naming the field) and the job's NetworkPolicy."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from rlhf_operator.api.v1alpha1 import ConditionReason, ConditionType, Phase
from rlhf_operator.builders.children import render_children
from rlhf_operator.builders.network import build_network_policy
from rlhf_operator.reconcile.decide import decide
from rlhf_operator.reconcile.observed import Observed
from rlhf_operator.reconcile.platform_policy import image_allowed, policy_problems
from rlhf_operator.render import render_file
from rlhf_operator.settings import OperatorSettings, PlatformPolicy, SettingsError

from .factories import job_body, make_job, make_spec

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
POLICY = PlatformPolicy(
    allowed_image_prefixes=("registry.example.com/ml", "ghcr.io/rlhf-operator/"),
    allowed_priority_classes=("training-low", "training-high"),
    allowed_scheduler_names=("volcano",),
    allowed_node_selector_keys=("nvidia.com/gpu.product",),
    node_selector=(("pool", "ml"),),
    require_queue_name=True,
)
STRICT = replace(SETTINGS, policy=POLICY)
QUEUED = {"queueName": "research"}

# id -> (spec sections, the field the problem must name); every row is refused.
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "image-from-elsewhere": (
        {"image": "docker.io/evil/trainer:1", "placement": QUEUED},
        "spec.image",
    ),
    "image-prefix-lookalike": (
        {"image": "registry.example.com/ml-evil/t:1", "placement": QUEUED},
        "spec.image",
    ),
    "priority-class": (
        {"placement": {**QUEUED, "priorityClassName": "system-node-critical"}},
        "spec.placement.priorityClassName",
    ),
    "scheduler": (
        {"placement": {**QUEUED, "schedulerName": "my-scheduler"}},
        "spec.placement.schedulerName",
    ),
    "node-selector-key": (
        {"placement": {**QUEUED, "nodeSelector": {"kubernetes.io/hostname": "node-7"}}},
        "spec.placement.nodeSelector.kubernetes.io/hostname",
    ),
    "fixed-node-selector-changed": (
        {"placement": {**QUEUED, "nodeSelector": {"pool": "infra"}}},
        "spec.placement.nodeSelector.pool",
    ),
    "no-queue": ({}, "spec.placement.queueName"),
}


@pytest.mark.parametrize(("sections", "field"), REFUSED.values(), ids=REFUSED.keys())
def test_a_job_that_breaks_policy_is_invalid_and_names_the_field(
    sections: dict[str, Any], field: str
) -> None:
    decision = decide(job_body(**sections), Observed(), STRICT, NOW)
    valid = {c.type: c for c in decision.status.conditions}[ConditionType.VALID]
    assert (valid.status.value, valid.reason) == ("False", ConditionReason.POLICY_VIOLATION)
    assert field + ":" in valid.message, valid.message
    assert decision.invalid is not None and decision.apply == ()
    assert decision.status.phase is Phase.FAILED
    assert [e.reason for e in decision.events] == [ConditionReason.POLICY_VIOLATION]


def test_a_job_within_policy_runs_with_the_platforms_node_selector() -> None:
    body = job_body(
        image="registry.example.com/ml/trainer:1.2",
        placement={
            **QUEUED,
            "priorityClassName": "training-high",
            "schedulerName": "volcano",
            "nodeSelector": {"nvidia.com/gpu.product": "H100", "pool": "ml"},
        },
    )
    decision = decide(body, Observed(), STRICT, NOW)
    assert decision.invalid is None
    [ray_job] = [d.obj for d in decision.apply if d.kind == "RayJob"]
    cluster = ray_job["spec"]["rayClusterSpec"]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["nodeSelector"] == {"nvidia.com/gpu.product": "H100", "pool": "ml"}
    # The submitter runs where the platform says, without the job's GPU selector.
    assert ray_job["spec"]["submitterPodTemplate"]["spec"]["nodeSelector"] == {"pool": "ml"}


def test_no_policy_allows_anything_and_the_default_image_is_the_platforms() -> None:
    spec = make_spec(image="docker.io/anyone/trainer:1", placement={"priorityClassName": "x"})
    assert policy_problems(spec, SETTINGS) == []
    # With a prefix policy, a job without spec.image runs the operator's own default image.
    assert policy_problems(make_spec(placement=QUEUED), STRICT) == []


@pytest.mark.parametrize(
    ("image", "prefix", "allowed"),
    [
        ("ghcr.io/org/trainer:1", "ghcr.io/org", True),
        ("ghcr.io/org:1", "ghcr.io/org", True),
        ("ghcr.io/org@sha256:" + "a" * 64, "ghcr.io/org", True),
        ("ghcr.io/org", "ghcr.io/org", True),
        ("ghcr.io/org-evil/trainer:1", "ghcr.io/org", False),
        ("ghcr.io/organisation/x", "ghcr.io/org", False),
        ("ghcr.io/org/x", "ghcr.io/", True),
        ("evil.io/ghcr.io/org/x", "ghcr.io/org", False),
    ],
)
def test_image_prefixes_match_at_a_path_boundary(image: str, prefix: str, allowed: bool) -> None:
    assert image_allowed(image, prefix) is allowed


def test_restricted_egress_needs_the_api_servers_addresses() -> None:
    spec = make_spec(network={"egress": "restricted"})
    [problem] = policy_problems(spec, SETTINGS)
    assert problem.startswith("spec.network.egress:") and "API_SERVER_CIDRS" in problem
    assert policy_problems(spec, replace(SETTINGS, api_server_cidrs=("10.0.0.1/32",))) == []


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RLHF_OPERATOR_NODE_SELECTOR": "pool"}, "key=value"),
        ({"RLHF_OPERATOR_REQUIRE_QUEUE_NAME": "yes"}, "true or false"),
        ({"RLHF_OPERATOR_API_SERVER_CIDRS": "10.0.0.1"}, "CIDRs"),
        ({"RLHF_OPERATOR_KUBERAY_NAMESPACE": "Kube Ray"}, "namespace"),
    ],
)
def test_bad_policy_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=f"{next(iter(env))}: .*{message}"):
        OperatorSettings.from_env(env)


# --- NetworkPolicy ---------------------------------------------------------------------------


def test_only_the_jobs_pods_reach_its_ray_ports_and_egress_stays_open() -> None:
    job = make_job()
    policy = build_network_policy(job, SETTINGS)
    spec = policy["spec"]
    mine = {"podSelector": {"matchLabels": {"rlhf.dev/job": "ppo-7b"}}}
    assert spec["podSelector"] == mine["podSelector"]  # head, workers and submitter alike
    assert spec["policyTypes"] == ["Ingress"]  # no egress rules: downloads work
    assert spec["ingress"] == [
        {"from": [mine]},
        # KubeRay polls the dashboard; from anywhere when its namespace is not known.
        {"from": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP", "port": 8265}]},
    ]
    kubernetes_validate.validate(policy, "1.33.0", strict=True)


def test_the_dashboard_is_open_to_kuberays_namespace_only_when_known() -> None:
    settings = replace(SETTINGS, kuberay_namespace="kuberay-system")
    spec = build_network_policy(make_job(), settings)["spec"]
    selector = {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}}
    assert spec["ingress"][1]["from"] == [{"namespaceSelector": selector}]


def test_restricted_egress_allows_dns_the_job_the_api_and_its_cidrs() -> None:
    settings = replace(SETTINGS, api_server_cidrs=("10.96.0.1/32",))
    job = make_job(network={"egress": "restricted", "egressCidrs": ["192.168.10.0/24"]})
    policy = build_network_policy(job, settings)
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == [
        {"to": [{"podSelector": {"matchLabels": {"rlhf.dev/job": "ppo-7b"}}}]},
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {
            "to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}],
            "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}],
        },
        {"to": [{"ipBlock": {"cidr": "192.168.10.0/24"}}]},
    ]
    kubernetes_validate.validate(policy, "1.33.0", strict=True)


def test_the_network_policy_comes_before_any_pod() -> None:
    kinds = [o["kind"] for o in render_children(make_job(), SETTINGS).all]
    assert kinds.index("NetworkPolicy") < kinds.index("RayJob")


def test_the_dry_run_applies_the_policy_of_its_settings() -> None:
    fixture = Path(__file__).parent / "fixtures" / "ppo-7b-paper.yaml"
    low_only = replace(SETTINGS, policy=PlatformPolicy(allowed_priority_classes=("training-low",)))
    [rendered] = render_file(fixture, low_only)
    assert rendered.objects == []
    assert any(p.startswith("spec.placement.priorityClassName:") for p in rendered.problems)
    [rendered] = render_file(fixture, SETTINGS)
    assert rendered.objects and not rendered.problems
