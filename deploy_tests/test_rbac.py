"""Least-privilege RBAC, checked on what Helm and kustomize actually render: no wildcards,
namespaced mode with Roles only, the same rules in both install paths, and enough rights for
what the operator's builders create (including the trainer Role it grants, which RBAC only lets
it create if it holds those permissions itself). test_least_privilege.py checks the other
direction: nothing granted that the operator does not use."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_tool import REPO, Helm, Manifest, by_kind, kubectl_kustomize, one, parse_manifests
from scenarios import NAMESPACED, SCENARIOS

BASE = REPO / "manifests" / "base"
NAMESPACED_OVERLAY = REPO / "manifests" / "overlays" / "namespaced"
RBAC_KINDS = ("ClusterRole", "Role")
EXAMPLE = REPO / "manifests" / "examples" / "rloo.yaml"

# Plural and API group of every kind the operator's builders create.
RESOURCE_OF_KIND = {
    "ConfigMap": ("", "configmaps"),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
    "Secret": ("", "secrets"),
    "ServiceAccount": ("", "serviceaccounts"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
    "Role": ("rbac.authorization.k8s.io", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
    "RayJob": ("ray.io", "rayjobs"),
}
# What reconciling a child takes (rlhf_operator.kube.apply): read its metadata (ownership),
# create it, and server-side apply it (patch), unless it is create-only. Never update nor
# delete (garbage collection removes children; only RayJobs are deleted, checked below).
CHILD_VERBS = ("get", "create", "patch")
CREATE_ONLY_VERBS = ("get", "create")

Permission = tuple[str, str, str]  # (apiGroup, resource, verb)


def _permissions(rules: Sequence[dict[str, Any]]) -> set[Permission]:
    """Unrestricted permissions only (rules with resourceNames grant less, skip them)."""
    return {
        (group, resource, verb)
        for rule in rules
        if not rule.get("resourceNames")
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _granted(manifests: Sequence[Manifest]) -> set[Permission]:
    """Everything the (Cluster)Roles of one install grant, without resourceNames limits."""
    return set().union(*(_permissions(m["rules"]) for m in manifests if m["kind"] in RBAC_KINDS))


def _rules(manifests: Sequence[Manifest]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in manifests:
        if obj["kind"] in RBAC_KINDS:
            for rule in obj["rules"]:
                yield f"{obj['kind']}/{obj['metadata']['name']}", rule


def _helm(helm: Helm, chart: Path, scenario: str) -> list[Manifest]:
    return parse_manifests(helm.template(chart, SCENARIOS[scenario]))


@pytest.fixture(scope="module")
def installs(helm: Helm, offline_chart: Path) -> dict[str, list[Manifest]]:
    """Every way to install: Helm scenarios and the kustomize base and overlay."""
    rendered = {f"helm:{name}": _helm(helm, offline_chart, name) for name in SCENARIOS}
    rendered["kustomize:base"] = kubectl_kustomize(BASE)
    rendered["kustomize:namespaced"] = kubectl_kustomize(NAMESPACED_OVERLAY)
    return rendered


INSTALLS = [f"helm:{name}" for name in SCENARIOS if name != "rbac-external"] + [
    "kustomize:base",
    "kustomize:namespaced",
]


@pytest.mark.parametrize("install", INSTALLS)
def test_no_wildcards_and_no_non_resource_urls(
    installs: dict[str, list[Manifest]], install: str
) -> None:
    rules = list(_rules(installs[install]))
    assert rules, f"{install} renders no RBAC rules"
    for owner, rule in rules:
        assert "nonResourceURLs" not in rule, owner
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert not any("*" in value for value in rule.get(field, [])), (owner, rule)


@pytest.mark.parametrize("install", INSTALLS)
def test_never_lists_secrets_nor_execs_nor_escalates(
    installs: dict[str, list[Manifest]], install: str
) -> None:
    # Secrets: the operator creates each job's Ray token and reads back the metadata of a Secret
    # with that name (is it its own?), so `get` and `create`, no more. Never list or watch
    # (that would hand it every Secret of the namespaces at once), never update or delete (a
    # token is not rotated under a running job; garbage collection deletes it). The trainers'
    # own credentials stay secretKeyRefs the operator never reads. No exec, no logs: pods are
    # only listed (why a starting attempt's pods do not run). Holding what it grants makes
    # `bind`/`escalate`/`impersonate` unnecessary.
    for owner, rule in _rules(installs[install]):
        resources = set(rule["resources"])
        assert not {"pods/exec", "pods/log", "nodes"} & resources, owner
        if "secrets" in resources:
            assert set(rule["verbs"]) <= {"get", "create"}, (owner, rule)
        if "pods" in resources:
            assert (resources, rule["verbs"]) == ({"pods"}, ["list", "watch"]), (owner, rule)
        assert not {"bind", "escalate", "impersonate", "deletecollection"} & set(rule["verbs"]), (
            owner,
            rule,
        )


@pytest.mark.parametrize(
    "install", [f"helm:{name}" for name in sorted(NAMESPACED)] + ["kustomize:namespaced"]
)
def test_namespaced_mode_has_roles_only(installs: dict[str, list[Manifest]], install: str) -> None:
    kinds = {obj["kind"] for obj in installs[install]}
    assert "Role" in kinds and "RoleBinding" in kinds
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}


@pytest.mark.parametrize("install", ["helm:default", "helm:peering-cluster-wide", "kustomize:base"])
def test_cluster_wide_mode_binds_one_cluster_role(
    installs: dict[str, list[Manifest]], install: str
) -> None:
    manifests = installs[install]
    role = one(manifests, "ClusterRole")
    binding = one(manifests, "ClusterRoleBinding")
    service_account = one(manifests, "ServiceAccount")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": service_account["metadata"]["name"],
            "namespace": service_account["metadata"]["namespace"],
        }
    ]
    assert not by_kind(manifests, "Role")


def test_helm_and_kustomize_grant_the_same_rules(installs: dict[str, list[Manifest]]) -> None:
    helm_cluster = one(installs["helm:default"], "ClusterRole")["rules"]
    kustomize_cluster = one(installs["kustomize:base"], "ClusterRole")["rules"]
    assert helm_cluster == kustomize_cluster
    helm_roles = by_kind(installs["helm:namespaced"], "Role")
    kustomize_role = one(installs["kustomize:namespaced"], "Role")
    assert all(role["rules"] == kustomize_role["rules"] for role in helm_roles)


def test_namespaced_rules_are_the_cluster_rules_minus_cluster_scoped_reads(
    installs: dict[str, list[Manifest]],
) -> None:
    cluster = _permissions(one(installs["helm:default"], "ClusterRole")["rules"])
    namespaced = _permissions(by_kind(installs["helm:namespaced"], "Role")[0]["rules"])
    assert cluster - namespaced == {
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    }
    assert namespaced <= cluster


@pytest.mark.parametrize(
    ("install", "resource"),
    [
        ("helm:peering-cluster-wide", "clusterkopfpeerings"),
        ("helm:peering-namespaced", "kopfpeerings"),
    ],
)
def test_peering_replicas_may_write_their_keepalives(
    installs: dict[str, list[Manifest]], install: str, resource: str
) -> None:
    granted = _granted(installs[install])
    for verb in ("get", "list", "watch", "patch"):
        assert ("kopf.dev", resource, verb) in granted
    unpeered = _granted(installs["helm:default"])
    assert not any(group == "kopf.dev" for group, _, _ in unpeered)


def _example_job() -> Any:
    """An example RLHFJob as the API server would hand it to the operator (with checkpoint
    storage, so that a PVC is among the children)."""
    api = pytest.importorskip("rlhf_operator.api.v1alpha1")
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"].update(namespace="team-a", uid="6f1c7c2e-0000-4000-8000-000000000001")
    assert manifest["spec"]["checkpoint"]["storage"]["size"]
    return api.RLHFJob.model_validate(manifest)


def _example_desired() -> list[Any]:
    """The children of the example job as the operator's pass applies them (create-only or
    not), by `reconcile.decide` itself."""
    reconcile = pytest.importorskip("rlhf_operator.reconcile.decide")
    observed = pytest.importorskip("rlhf_operator.reconcile.observed")
    settings = pytest.importorskip("rlhf_operator.settings")
    job = _example_job()
    body = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    operator_settings = settings.OperatorSettings(default_trainer_image="trainer:1")
    decision = reconcile.decide(body, observed.Observed(), operator_settings, now)
    return list(decision.apply)


@pytest.mark.parametrize("install", ["helm:default", "helm:namespaced", "kustomize:namespaced"])
def test_operator_holds_what_it_needs_for_every_child_it_builds(
    installs: dict[str, list[Manifest]], install: str
) -> None:
    children = pytest.importorskip("rlhf_operator.builders.children")
    settings = pytest.importorskip("rlhf_operator.settings")
    # The operator's settings exactly as the rendered Deployment configures them.
    container = one(installs[install], "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    operator_settings = settings.OperatorSettings.from_env(env)
    built = children.render_children(_example_job(), operator_settings).all
    granted = _granted(installs[install])
    kinds = {child["kind"] for child in built}
    assert kinds <= set(RESOURCE_OF_KIND), (
        f"new child kinds need RBAC: {kinds - set(RESOURCE_OF_KIND)}"
    )
    for child in _example_desired():
        group, resource = RESOURCE_OF_KIND[child.kind]
        verbs = CREATE_ONLY_VERBS if child.create_only else CHILD_VERBS
        missing = [verb for verb in verbs if (group, resource, verb) not in granted]
        assert not missing, f"{install}: cannot {missing} {resource} ({child.name})"
    # Stale attempts are deleted; ttlSecondsAfterFinished deletes the RLHFJob.
    assert ("ray.io", "rayjobs", "delete") in granted
    assert ("rlhf.dev", "rlhfjobs", "delete") in granted
    # Children carry ownerReferences with blockOwnerDeletion: that takes update on finalizers
    # where the OwnerReferencesPermissionEnforcement admission plugin is on.
    if any(
        ref.get("blockOwnerDeletion")
        for c in built
        for ref in c["metadata"].get("ownerReferences", [])
    ):
        assert ("rlhf.dev", "rlhfjobs/finalizers", "update") in granted


@pytest.mark.parametrize("install", ["helm:default", "helm:namespaced", "kustomize:namespaced"])
def test_operator_holds_every_permission_it_grants_to_trainers(
    installs: dict[str, list[Manifest]], install: str
) -> None:
    # RBAC escalation prevention: creating a Role (and binding it) is only allowed to a subject
    # that holds all of the Role's permissions, unless it has `escalate`/`bind` (it must not).
    report = pytest.importorskip("rlhf_operator.builders.report")
    trainer_role = report.build_role(_example_job())
    granted = _granted(installs[install])
    wanted = {
        (group, resource, verb)
        for rule in trainer_role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert wanted, "the trainer Role grants nothing"
    assert wanted <= granted, f"the operator could not create the trainer Role: {wanted - granted}"


def test_the_trainer_may_write_its_report_read_events_and_nothing_else() -> None:
    # The trainer (user code runs beside it) may patch one object: its job's report
    # ConfigMap. Not the RLHFJob, not its status (conditions, phase, retries are the
    # operator's), not another job's report, nothing cluster-wide. It may read the
    # namespace's Events (no object can be named there), of which it keeps the job's.
    report = pytest.importorskip("rlhf_operator.builders.report")
    job = _example_job()
    role = report.build_role(job)
    assert role["kind"] == "Role"  # namespaced
    allowed = {
        (group, resource, name, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for name in rule.get("resourceNames") or ["*"]
        for verb in rule["verbs"]
    }
    assert allowed == {
        ("", "configmaps", f"{job.name}-report", "patch"),
        ("", "events", "*", "list"),
        ("", "events", "*", "watch"),
    }
    assert not any(group == "rlhf.dev" for group, _, _, _ in allowed)


@pytest.mark.parametrize("install", INSTALLS)
def test_operator_may_watch_the_jobs_pods(
    installs: dict[str, list[Manifest]], install: str
) -> None:
    # handlers/jobs.py watches them (by label) to say why they do not run.
    assert {("", "pods", "list"), ("", "pods", "watch")} <= _granted(installs[install])
