"""What a platform team relies on: metrics, liveness, Kueue admission, adoption of orphans,
and two replicas under kopf peering."""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import aiohttp
import pytest

from .harness import REPO, TEST_SETTINGS, Cluster, operator_running, ppo_manifest

PEERING_CRDS = "helm/rlhf-operator/charts/kopf-peering/crds/kopf.dev_peerings.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as reply:
        return reply.status, await reply.text()


async def test_metrics_and_liveness(cluster: Cluster) -> None:
    c = cluster
    metrics_port, health_port = free_port(), free_port()
    settings = dataclasses.replace(
        TEST_SETTINGS, metrics_port=metrics_port, health_port=health_port
    )
    async with operator_running(settings):
        for name in ("ppo-m1", "ppo-m2"):
            c.create(ppo_manifest(name))
        await c.until(
            lambda: (
                c.status("ppo-m2").get("phase") == "Provisioning"
                and c.status("ppo-m1").get("phase") == "Provisioning"
            ),
            "both provisioning",
        )
        status, text = await _get(f"http://127.0.0.1:{health_port}/healthz")
        assert status == 200
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        # Read from the operator's watch cache, which may be a moment behind the server.
        for _ in range(50):
            status, text = await _get(metrics_url)
            if 'rlhf_operator_jobs{phase="Provisioning"} 2.0' in text:
                break
            await asyncio.sleep(0.1)
        assert status == 200
        assert 'rlhf_operator_jobs{phase="Provisioning"} 2.0' in text
        assert 'rlhf_operator_jobs{phase="Failed"} 0.0' in text
        assert 'rlhf_operator_reconcile_duration_seconds_count{trigger="create"}' in text
        assert 'rlhf_operator_children_applied_total{kind="RayJob",outcome="created"} 2.0' in text
        # A new job's children are created (POST) without a look first.
        assert 'rlhf_operator_api_requests_total{code="201",kind="RayJob",verb="POST"} 2.0' in text


async def test_kueue_owns_suspend_while_queued(operator: Cluster) -> None:
    c = operator
    c.create(ppo_manifest("ppo-q", placement={"queueName": "research"}))
    await c.until(lambda: c.ray_jobs("ppo-q"), "RayJob")
    [ray_job] = c.ray_jobs("ppo-q")
    assert ray_job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"
    assert ray_job["spec"]["suspend"] is True  # created suspended: Kueue decides when it runs
    c.kuberay("ppo-q-r0", jobDeploymentStatus="Suspended")
    await c.until(
        lambda: c.conditions("ppo-q").get("Admitted") == ("False", "WaitingForAdmission"),
        "waiting for admission",
    )
    assert c.status("ppo-q")["phase"] == "Pending"

    # Kueue admits: it unsuspends the RayJob. The operator must not suspend it again.
    c.k8s.patch("rayjobs.ray.io", "ppo-q-r0", {"spec": {"suspend": False}}, "default")
    c.kuberay("ppo-q-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await c.phase("ppo-q", "Running")
    assert c.conditions("ppo-q")["Admitted"] == ("True", "RayJobCreated")
    await asyncio.sleep(0.5)
    assert c.ray_jobs("ppo-q")[0]["spec"]["suspend"] is False


async def test_orphan_with_our_name_is_not_adopted(operator: Cluster) -> None:
    # No adoption by name: an object without this job's controller reference is someone
    # else's, whatever its name (adopting it would let a job author have the operator rewrite
    # and later garbage-collect what they could not edit themselves).
    c = operator
    c.k8s.create(
        "configmaps",
        {"metadata": {"name": "ppo-ad-config"}, "data": {"job.yaml": "stale"}},
        "default",
    )
    before = c.k8s.get("configmaps", "ppo-ad-config", "default")
    c.create(ppo_manifest("ppo-ad"))
    await c.until(
        lambda: c.conditions("ppo-ad").get("ChildrenApplied") == ("False", "ChildConflict"),
        "ChildConflict",
    )
    assert "ConfigMap ppo-ad-config (not created by this job)" in c.status("ppo-ad")["message"]
    assert c.k8s.get("configmaps", "ppo-ad-config", "default") == before
    assert not c.ray_jobs("ppo-ad")
    await c.until(lambda: "ChildConflict" in c.reasons("ppo-ad"), "ChildConflict event")


async def test_two_replicas_with_peering_one_works(cluster: Cluster) -> None:
    c, k8s = cluster, cluster.k8s
    crds = REPO / PEERING_CRDS
    if not crds.exists():
        pytest.skip(f"kopf peering CRDs not found at {crds}")
    k8s.register_crds(crds)
    k8s.create("clusterkopfpeerings.kopf.dev", {"metadata": {"name": "rlhf"}})
    replicas = [
        dataclasses.replace(TEST_SETTINGS, peering="rlhf", peering_priority=p, instance=name)
        for p, name in ((10, "replica-low"), (20, "replica-high"))
    ]
    async with operator_running(replicas[0]), operator_running(replicas[1]):
        # kopf peering: the lower priority pauses once it sees the higher one.
        await c.until(
            lambda: len(k8s.get("clusterkopfpeerings.kopf.dev", "rlhf").get("status") or {}) == 2,
            "both replicas announced",
        )
        await asyncio.sleep(1.0)
        c.create(ppo_manifest("ppo-p"))
        await c.until(lambda: c.ray_jobs("ppo-p"), "RayJob")
        await c.until(lambda: "Created" in c.reasons("ppo-p"), "events")
        await asyncio.sleep(1.0)
        instances = {e.raw.get("reportingInstance") for e in k8s.events("default", about="ppo-p")}
        assert instances == {"replica-high"}
