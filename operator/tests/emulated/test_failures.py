"""Failures the user can see, against the real operator: children the API server refuses (no
KubeRay, a quota), pods that do not start, and failure classes (not retryable, preempted)."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest

from emulator import run_emulator
from emulator.harness import KUBERAY_CRDS_DIR, OUR_CRD

from .harness import RAYJOBS, Cluster, operator_running, ppo_manifest


@pytest.fixture
async def without_kuberay(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Cluster]:
    """Our CRD only: a cluster where KubeRay was never installed."""
    async with run_emulator(crds=[OUR_CRD], kubeconfig=tmp_path / "kubeconfig") as k8s:
        assert k8s.kubeconfig is not None
        monkeypatch.setenv("KUBECONFIG", str(k8s.kubeconfig))
        async with operator_running():
            yield Cluster(k8s)


# KubeRay's status of a failed attempt. The trainer wrote its outcome just before, but the
# operator may see KubeRay's change first: it waits a little for the outcome after `endTime`.
_FAILED = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed"}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event(c: Cluster, job: str, reason: str) -> Any:
    return next((e for e in c.k8s.events("default", about=job) if e.reason == reason), None)


async def test_no_kuberay_crd_is_a_condition_and_an_event_naming_the_rayjob(
    without_kuberay: Cluster,
) -> None:
    c = without_kuberay
    c.create(ppo_manifest("ppo-nk"))
    event = await c.until(lambda: _event(c, "ppo-nk", "ChildApplyFailed"), "event", timeout=30)
    assert event.type == "Warning"
    assert event.message.startswith("RayJob ppo-nk-r0: HTTP 404")
    assert "is KubeRay installed?" in event.message
    assert c.conditions("ppo-nk")["ChildrenApplied"] == ("False", "ChildApplyFailed")
    status = c.status("ppo-nk")
    assert status["phase"] == "Pending" and "RayJob ppo-nk-r0" in status["message"]
    # The other children exist; once KubeRay is installed, the next try creates the RayJob.
    assert c.k8s.find("configmaps", "ppo-nk-config", "default") is not None
    c.k8s.register_crds(KUBERAY_CRDS_DIR)
    await c.until(lambda: c.ray_jobs("ppo-nk"), "RayJob after KubeRay arrived", timeout=30)
    await c.until(
        lambda: c.conditions("ppo-nk")["ChildrenApplied"] == ("True", "ChildrenApplied"),
        "ChildrenApplied again",
    )


async def test_quota_refusal_is_a_condition_and_holds_back_the_rayjob(operator: Cluster) -> None:
    c = operator
    quota = (
        'configmaps "ppo-q-config" is forbidden: exceeded quota: team-quota, requested: '
        "count/configmaps=1, used: count/configmaps=10, limited: count/configmaps=10"
    )
    # A new job's report and config are both created (POST, side by side): both refused once.
    c.k8s.faults.add("create", "configmaps", code=403, reason="Forbidden", message=quota, times=2)
    c.create(ppo_manifest("ppo-q"))
    await c.until(
        lambda: c.conditions("ppo-q").get("ChildrenApplied") == ("False", "ChildApplyFailed"),
        "ChildrenApplied=False",
    )
    [condition] = [x for x in c.status("ppo-q")["conditions"] if x["type"] == "ChildrenApplied"]
    # Both of the job's ConfigMaps (the report and the config) met the quota.
    assert f"ConfigMap ppo-q-config: HTTP 403 Forbidden: {quota}" in condition["message"]
    assert not c.ray_jobs("ppo-q")  # its pods would mount the missing ConfigMap
    # The quota frees up (the fault is spent): the backoff's next try goes through.
    await c.until(lambda: c.ray_jobs("ppo-q"), "RayJob once the ConfigMap exists", timeout=20)


async def test_not_retryable_trainer_outcome_fails_without_retries(operator: Cluster) -> None:
    c = operator
    c.create(ppo_manifest("ppo-inv", runPolicy={"backoffLimit": 3}))
    await c.until(lambda: c.ray_jobs("ppo-inv"), "RayJob")
    c.kuberay("ppo-inv-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await c.phase("ppo-inv", "Running")
    why = "data.train[0].inputKey: no column 'prompt' in org/prompts (columns: text)"
    c.trainer_reports(
        "ppo-inv",
        {"outcome": {"attempt": 0, "exitCode": 78, "failureClass": "InvalidSpec", "message": why}},
    )
    c.kuberay("ppo-inv-r0", **_FAILED, endTime=_now())
    status = await c.phase("ppo-inv", "Failed")
    assert c.conditions("ppo-inv")["Failed"] == ("True", "NotRetryable")
    assert why in status["message"] and status["restarts"] == 0
    await asyncio.sleep(0.5)
    assert [r["metadata"]["name"] for r in c.ray_jobs("ppo-inv")] == ["ppo-inv-r0"]
    await c.until(lambda: _event(c, "ppo-inv", "NotRetryable"), "NotRetryable event")


async def test_preempted_attempt_is_retried_without_spending_the_backoff_limit(
    operator: Cluster,
) -> None:
    c = operator
    c.create(ppo_manifest("ppo-pre", runPolicy={"backoffLimit": 0}))
    await c.until(lambda: c.ray_jobs("ppo-pre"), "RayJob")
    c.kuberay("ppo-pre-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await c.phase("ppo-pre", "Running")
    c.trainer_reports(
        "ppo-pre",
        {
            "checkpoints": [{"step": 40, "path": "/checkpoints/step-40"}],
            "outcome": {"attempt": 0, "exitCode": 75, "failureClass": "Preempted"},
        },
    )
    c.kuberay("ppo-pre-r0", **_FAILED, endTime=_now())
    # backoffLimit 0, yet a fresh attempt: preemption is not counted against it.
    await c.until(
        lambda: [r["metadata"]["name"] for r in c.ray_jobs("ppo-pre")] == ["ppo-pre-r1"],
        "attempt 1 replaces attempt 0",
    )
    status = await c.until(
        lambda: (s := c.status("ppo-pre")).get("preemptions") == 1 and s, "preemption recorded"
    )
    assert status["restarts"] - status["preemptions"] == 0  # what counts against backoffLimit
    assert c.conditions("ppo-pre")["Restarted"] == ("True", "Preempted")
    assert status["usage"]["attempts"] >= 1
    await c.until(lambda: _event(c, "ppo-pre", "Preempted"), "Preempted event")


def _pod(name: str, job: str, attempt: int) -> dict[str, Any]:
    """A pod as KubeRay makes it from our template: labelled with the job and attempt."""
    return {
        "metadata": {
            "name": name,
            "labels": {"rlhf.dev/job": job, "rlhf.dev/attempt": str(attempt)},
        },
        "spec": {"containers": [{"name": "ray-head", "image": "rlhf-trainer:typo"}]},
    }


async def test_pods_that_never_start_are_reported_then_time_out(operator: Cluster) -> None:
    c, k8s = operator, operator.k8s
    c.create(ppo_manifest("ppo-st", runPolicy={"startupTimeoutSeconds": 4}))
    await c.until(lambda: c.ray_jobs("ppo-st"), "RayJob")
    c.kuberay("ppo-st-r0", jobDeploymentStatus="Initializing")  # KubeRay made the pods
    pull = 'Back-off pulling image "rlhf-trainer:typo"'
    k8s.create("pods", _pod("ppo-st-r0-head-x1", "ppo-st", 0), "default")
    k8s.patch_status(
        "pods",
        "ppo-st-r0-head-x1",
        {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "ray-head",
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": pull}},
                }
            ],
        },
        "default",
    )
    await c.until(
        lambda: c.conditions("ppo-st").get("ClusterReady") == ("False", "ImagePullFailed"),
        "ClusterReady=False ImagePullFailed",
    )
    event = await c.until(lambda: _event(c, "ppo-st", "ImagePullFailed"), "event")
    assert "pod ppo-st-r0-head-x1" in event.message and pull in event.message
    status = await c.phase("ppo-st", "Failed", timeout=20)
    assert c.conditions("ppo-st")["Failed"] == ("True", "StartupTimeout")
    assert pull in status["message"]
    await c.until(lambda: k8s.find(RAYJOBS, "ppo-st-r0", "default") is None, "RayJob deleted")


async def test_a_pod_trouble_that_clears_is_read_again(operator: Cluster) -> None:
    """A pod event runs the job's pass only where a problem came or went: the pull that
    failed and then succeeded takes ClusterReady from ImagePullFailed back to provisioning."""
    c, k8s = operator, operator.k8s
    c.create(ppo_manifest("ppo-pc"))
    await c.until(lambda: c.ray_jobs("ppo-pc"), "RayJob")
    c.kuberay("ppo-pc-r0", jobDeploymentStatus="Initializing")
    await c.phase("ppo-pc", "Provisioning")
    k8s.create("pods", _pod("ppo-pc-r0-head-x1", "ppo-pc", 0), "default")

    def head_is(phase: str, state: dict[str, Any]) -> None:
        status = {"phase": phase, "containerStatuses": [{"name": "ray-head", "state": state}]}
        k8s.patch_status("pods", "ppo-pc-r0-head-x1", status, "default")

    head_is("Pending", {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off"}})
    await c.until(
        lambda: c.conditions("ppo-pc").get("ClusterReady") == ("False", "ImagePullFailed"),
        "ClusterReady=False ImagePullFailed",
    )
    head_is("Running", {"running": {"startedAt": _now()}})
    await c.until(
        lambda: c.conditions("ppo-pc").get("ClusterReady") == ("False", "ClusterProvisioning"),
        "ClusterReady back to ClusterProvisioning",
    )


async def _evict(c: Cluster, pod: str, grace: int = 30) -> None:
    """`kubectl drain`'s request (policy/v1 Eviction) over HTTP."""
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": grace},
    }
    url = f"{c.k8s.url}/api/v1/namespaces/default/pods/{pod}/eviction"
    async with aiohttp.ClientSession() as session, session.post(url, json=eviction) as answer:
        assert answer.status == 201, await answer.text()


async def test_evicting_every_pod_is_a_preemption_the_backoff_limit_does_not_pay(
    operator: Cluster,
) -> None:
    """A drain evicts every pod of a running attempt (DisruptionTarget on each): the job says
    Disrupted=True while they terminate; when the attempt then fails with no word from the
    trainer (its driver was killed before it could report), it is Preempted: retried with
    backoffLimit 0, preemptions 1."""
    c, k8s = operator, operator.k8s
    c.create(ppo_manifest("ppo-ev", runPolicy={"backoffLimit": 0}))
    await c.until(lambda: c.ray_jobs("ppo-ev"), "RayJob")
    c.kuberay("ppo-ev-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await c.phase("ppo-ev", "Running")
    pods = ["ppo-ev-r0-head-x1", "ppo-ev-r0-worker-y2"]
    for name in pods:
        body = _pod(name, "ppo-ev", 0)
        body["spec"]["nodeName"] = "node-1"  # bound: deleted gracefully, as a kubelet runs it
        k8s.create("pods", body, "default")
        k8s.patch_status("pods", name, {"phase": "Running"}, "default")
    for name in pods:
        await _evict(c, name)
    disrupted = await c.until(
        lambda: c.conditions("ppo-ev").get("Disrupted") == ("True", "Preempted"),
        "Disrupted=True",
    )
    assert disrupted
    [said] = [x for x in c.status("ppo-ev")["conditions"] if x["type"] == "Disrupted"]
    assert "ppo-ev-r0-head-x1" in said["message"]
    assert "EvictionByEvictionAPI: Eviction API: evicting" in said["message"]
    assert c.status("ppo-ev")["phase"] == "Running"  # checkpointing in its grace period
    event = await c.until(lambda: _event(c, "ppo-ev", "Preempted"), "Preempted event")
    assert event.type == "Warning" and "ppo-ev-r0-head-x1" in event.message
    for name in pods:  # the kubelet finished: the pods are gone
        k8s.delete("pods", name, "default", grace_period=0)
    c.kuberay("ppo-ev-r0", jobDeploymentStatus="Complete", jobStatus="STOPPED", endTime=_now())
    await c.until(
        lambda: [r["metadata"]["name"] for r in c.ray_jobs("ppo-ev")] == ["ppo-ev-r1"],
        "attempt 1 replaces attempt 0",
        timeout=30,
    )
    status = await c.until(
        lambda: (s := c.status("ppo-ev")).get("preemptions") == 1 and s, "preemption recorded"
    )
    assert (status["restarts"], status["preemptions"]) == (1, 1)
    assert c.conditions("ppo-ev")["Restarted"] == ("True", "Preempted")
    assert "Disrupted" not in c.conditions("ppo-ev")
    # The Restarted condition keeps why; status.message moves on with attempt 1 (under load it
    # may already say "starting the Ray cluster").
    [restarted] = [x for x in status["conditions"] if x["type"] == "Restarted"]
    assert "its pods were disrupted" in restarted["message"], restarted
