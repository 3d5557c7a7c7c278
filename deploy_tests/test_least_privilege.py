"""The chart grants exactly what the operator uses: its requests are recorded while the real
operator takes a job through its whole life against the API emulator (create, provisioning with
its pods listed, a spec edit, hand-edited children put back after a restart, a failed attempt
replaced, success, TTL deletion), turned into RBAC permissions, and compared with the rules
Helm renders. A grant nobody uses fails the test, as does a request the chart does not allow;
the grants that are not requests are listed with why."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from helm_tool import Helm, one, parse_manifests

from emulated.harness import RAYJOBS, Cluster, operator_running, ppo_manifest
from emulator import Emulator, project_crds, run_emulator

Permission = tuple[str, str, str]  # (apiGroup, resource, verb)

# Granted, never requested, each for a reason the API server enforces on other requests.
NOT_REQUESTS: dict[Permission, str] = {
    ("rlhf.dev", "rlhfjobs/finalizers", "update"): (
        "children's ownerReferences set blockOwnerDeletion, which the "
        "OwnerReferencesPermissionEnforcement admission plugin allows only with it"
    ),
    ("rlhf.dev", "rlhfpipelines/finalizers", "update"): (
        "stage jobs' ownerReferences set blockOwnerDeletion (as for RLHFJobs' children)"
    ),
    ("", "events", "list"): "the trainer's Role grants it (its head pod keeps the job's Events)",
    ("", "events", "watch"): "the trainer's Role grants it (its head pod keeps the job's Events)",
}


def _permission(verb: str, resource: str) -> Permission:
    """`rlhfjobs.rlhf.dev/status` -> ("rlhf.dev", "rlhfjobs/status", verb)."""
    name, _, sub = resource.partition("/")
    plural, _, group = name.partition(".")
    return (group, f"{plural}/{sub}" if sub else plural, verb)


def _granted(rules: list[dict[str, Any]]) -> set[Permission]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _hand_edit(k8s: Emulator) -> None:
    """What a user with edit rights might change on the children: the operator puts it back."""
    ns = "default"
    k8s.patch("serviceaccounts", "lp-trainer", {"automountServiceAccountToken": False}, ns)
    wider = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    k8s.patch("roles.rbac.authorization.k8s.io", "lp-trainer", {"rules": wider}, ns)
    subject = [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]
    k8s.patch("rolebindings.rbac.authorization.k8s.io", "lp-trainer", {"subjects": subject}, ns)
    k8s.patch("networkpolicies.networking.k8s.io", "lp-ray", {"spec": {"ingress": [{}]}}, ns)
    k8s.patch("configmaps", "lp-config", {"data": {"job.yaml": "edited"}}, ns)


async def _whole_life(c: Cluster) -> None:
    k8s = c.k8s
    job = ppo_manifest(
        "lp",
        checkpoint={"storage": {"size": "1Gi"}},
        runPolicy={"backoffLimit": 1, "ttlSecondsAfterFinished": 1},
    )
    async with operator_running():
        c.create(job)
        await c.until(lambda: c.ray_jobs("lp"), "RayJob")
        c.kuberay("lp-r0", jobDeploymentStatus="Initializing")
        await c.until(lambda: k8s.requests.count("watch", "pods"), "pods watched")
        c.edit_spec("lp", {"placement": {"priorityClassName": "high"}})
        c.kuberay("lp-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
        await c.phase("lp", "Running")
    _hand_edit(k8s)
    # A new operator knows nothing: it reads every child, and replaces what was edited.
    async with operator_running():
        await c.until(
            lambda: k8s.get("configmaps", "lp-config", "default")["data"]["job.yaml"] != "edited",
            "job config put back",
        )
        c.trainer_reports("lp", {"step": 1, "totalSteps": 2, "progress": "1/2"})
        c.kuberay("lp-r0", jobDeploymentStatus="Failed", jobStatus="FAILED")
        await c.until(lambda: k8s.find(RAYJOBS, "lp-r1", "default"), "attempt 1")
        await c.until(lambda: not k8s.find(RAYJOBS, "lp-r0", "default"), "attempt 0 deleted")
        c.kuberay(
            "lp-r1",
            jobDeploymentStatus="Complete",
            jobStatus="SUCCEEDED",
            endTime="2026-01-01T00:00:00Z",
        )
        await c.until(lambda: c.job("lp") is None, "deleted after its TTL", timeout=30)
        await asyncio.sleep(0.5)
    # Children go with the job, by garbage collection: the operator deletes none of them.
    assert k8s.find("roles.rbac.authorization.k8s.io", "lp-trainer", "default") is None
    await _pipeline_life(c)


async def _pipeline_life(c: Cluster) -> None:
    """An RLHFPipeline: its first stage job created, suspended with the pipeline, resumed."""
    k8s = c.k8s
    body = {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFPipeline",
        "metadata": {"name": "lpp", "namespace": "default"},
        "spec": {"stages": [{"name": "ppo", "spec": ppo_manifest("x")["spec"]}]},
    }
    async with operator_running():
        k8s.create("rlhfpipelines.rlhf.dev", body, "default")
        await c.until(lambda: c.ray_jobs("lpp-ppo"), "stage job's RayJob")
        k8s.patch("rlhfpipelines.rlhf.dev", "lpp", {"spec": {"suspend": True}}, "default")
        await c.until(
            lambda: (c.job("lpp-ppo") or {})["spec"]["runPolicy"]["suspend"], "stage suspended"
        )


@pytest.fixture
async def used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> set[Permission]:
    async with run_emulator(crds=project_crds(), kubeconfig=tmp_path / "kubeconfig") as k8s:
        if not any(i.group == "ray.io" for i in k8s.registry.all()):
            pytest.skip("KubeRay CRDs absent (../shared/kuberay-crds): no RayJob resource")
        assert k8s.kubeconfig is not None
        monkeypatch.setenv("KUBECONFIG", str(k8s.kubeconfig))
        await _whole_life(Cluster(k8s))
        # Every request in the log is the operator's: the test acts in-process. A
        # server-side apply that created its object (201) needed create as well as patch.
        return {
            _permission(verb, r.resource)
            for r in k8s.requests.records
            if r.resource != "discovery"
            for verb in ([r.verb, "create"] if (r.verb, r.code) == ("patch", 201) else [r.verb])
        }


async def test_the_chart_grants_exactly_what_the_operator_uses(
    used: set[Permission], helm: Helm, offline_chart: Path
) -> None:
    rules = one(parse_manifests(helm.template(offline_chart, {})), "ClusterRole")["rules"]
    granted = _granted(rules)
    assert used - granted == set(), "requests the chart does not allow"
    assert granted - used == set(NOT_REQUESTS), "grants the operator never uses"
    # The life above really went through the sensitive paths.
    for permission in (
        ("", "secrets", "create"),
        ("", "secrets", "get"),
        ("", "serviceaccounts", "patch"),
        ("rbac.authorization.k8s.io", "roles", "patch"),
        ("networking.k8s.io", "networkpolicies", "patch"),
        ("ray.io", "rayjobs", "delete"),
        ("rlhf.dev", "rlhfjobs", "delete"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("rlhf.dev", "rlhfjobs", "create"),
        ("rlhf.dev", "rlhfpipelines/status", "patch"),
    ):
        assert permission in used, permission
