"""RLHFPipeline against the real operator on the emulator: stages in dependency order, independent
stages at once, a failed stage stops the pipeline, suspend propagates, and an operator restart
mid-pipeline converges with each stage's RLHFJob created once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from .harness import Cluster, operator_running, ppo_manifest

PIPELINES = "rlhfpipelines.rlhf.dev"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _offline(algorithm: str, actor: dict[str, Any]) -> dict[str, Any]:
    return {
        "algorithm": {"name": algorithm},
        "models": {"actor": actor},
        "data": {"train": [{"hfId": "org/data"}]},
        "training": {"trainBatchSize": 32, "microTrainBatchSize": 1},
        "placement": {"gpusPerNode": 4},
    }


def _ppo(actor: dict[str, Any], reward: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = ppo_manifest("x")["spec"]
    spec["models"] = {"actor": actor, "rewardModels": [reward]}
    return spec


def pipeline(name: str, *, rm_from_sft: bool = True) -> dict[str, Any]:
    """sft -> rm -> ppo (InstructGPT), or sft and rm side by side -> ppo."""
    rm_actor = {"fromStage": "sft"} if rm_from_sft else {"pretrained": "org/base"}
    return {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFPipeline",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "stages": [
                {"name": "sft", "spec": _offline("sft", {"pretrained": "org/base"})},
                {"name": "rm", "spec": _offline("reward-model", rm_actor)},
                {"name": "ppo", "spec": _ppo({"fromStage": "sft"}, {"fromStage": "rm"})},
            ]
        },
    }


def _pstatus(c: Cluster, name: str) -> dict[str, Any]:
    return (c.k8s.find(PIPELINES, name, c.namespace) or {}).get("status") or {}


def _stages(c: Cluster, name: str) -> dict[str, str]:
    """stage -> its RLHFJob's phase, or its state while it has none."""
    return {s["name"]: s.get("phase") or s["state"] for s in _pstatus(c, name).get("stages", [])}


def _succeed(c: Cluster, job: str) -> None:
    c.kuberay(f"{job}-r0", jobDeploymentStatus="Complete", jobStatus="SUCCEEDED", endTime=_now())


async def test_stages_run_in_dependency_order(operator: Cluster) -> None:
    c = operator
    created = c.k8s.create(PIPELINES, pipeline("ig"), c.namespace)
    await c.until(lambda: c.ray_jobs("ig-sft"), "stage sft's RayJob")
    assert c.job("ig-rm") is None and c.job("ig-ppo") is None
    await c.until(
        lambda: _stages(c, "ig") == {"sft": "Provisioning", "rm": "Waiting", "ppo": "Waiting"},
        "per-stage phases",
    )
    sft = c.job("ig-sft")
    assert sft is not None
    owner = sft["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "RLHFPipeline",
        created["metadata"]["uid"],
        True,
    )
    assert sft["metadata"]["labels"] == {"rlhf.dev/pipeline": "ig", "rlhf.dev/stage": "sft"}
    assert _pstatus(c, "ig")["phase"] == "Running"

    _succeed(c, "ig-sft")
    await c.until(lambda: c.ray_jobs("ig-rm"), "stage rm once sft succeeded")
    rm = c.job("ig-rm")
    assert rm is not None and rm["spec"]["models"]["actor"] == {
        "fromJob": "ig-sft",
        "trustRemoteCode": False,
    }
    assert c.job("ig-ppo") is None
    _succeed(c, "ig-rm")
    await c.until(lambda: c.ray_jobs("ig-ppo"), "stage ppo once sft and rm succeeded")
    inputs = await c.until(lambda: c.status("ig-ppo").get("inputs"), "ppo's recorded inputs")
    assert [(i["role"], i["fromJob"], i["model"]) for i in inputs] == [
        ("actor", "ig-sft", "pvc://ig-sft-checkpoints/ig-sft/output/final"),
        ("rewardModels[0]", "ig-rm", "pvc://ig-rm-checkpoints/ig-rm/output/final"),
    ]
    _succeed(c, "ig-ppo")
    await c.until(lambda: _pstatus(c, "ig").get("phase") == "Succeeded", "pipeline Succeeded")
    status = _pstatus(c, "ig")
    assert status["progress"] == "3/3" and status["completionTime"]
    assert {s["name"]: s.get("output") for s in status["stages"]} == {
        "sft": "pvc://ig-sft-checkpoints/ig-sft/output/final",
        "rm": "pvc://ig-rm-checkpoints/ig-rm/output/final",
        "ppo": "pvc://ig-ppo-checkpoints/ig-ppo/output/final/actor",
    }


async def test_independent_stages_run_in_parallel(operator: Cluster) -> None:
    c = operator
    c.k8s.create(PIPELINES, pipeline("par", rm_from_sft=False), c.namespace)
    await c.until(lambda: c.ray_jobs("par-sft") and c.ray_jobs("par-rm"), "sft and rm at once")
    assert c.job("par-ppo") is None
    _succeed(c, "par-rm")
    await asyncio.sleep(0.5)
    assert c.job("par-ppo") is None  # still needs sft
    _succeed(c, "par-sft")
    await c.until(lambda: c.ray_jobs("par-ppo"), "ppo after both")


async def test_a_failed_stage_stops_the_pipeline(operator: Cluster) -> None:
    c = operator
    c.k8s.create(PIPELINES, pipeline("fl"), c.namespace)
    await c.until(lambda: c.ray_jobs("fl-sft"), "stage sft")
    c.fails_for_good("fl-sft", "bad data")
    await c.until(lambda: _pstatus(c, "fl").get("phase") == "Failed", "pipeline Failed")
    assert _stages(c, "fl") == {"sft": "Failed", "rm": "Blocked", "ppo": "Blocked"}
    assert "stage sft failed" in _pstatus(c, "fl")["message"]
    failed = {x["type"]: x["status"] for x in _pstatus(c, "fl")["conditions"]}
    assert failed["Failed"] == "True"
    await asyncio.sleep(0.5)
    assert c.job("fl-rm") is None and c.job("fl-ppo") is None


async def test_suspend_propagates_to_running_stages(operator: Cluster) -> None:
    c = operator
    c.k8s.create(PIPELINES, pipeline("sp", rm_from_sft=False), c.namespace)
    await c.until(lambda: c.ray_jobs("sp-sft") and c.ray_jobs("sp-rm"), "two stages")
    c.k8s.patch(PIPELINES, "sp", {"spec": {"suspend": True}}, c.namespace)
    await c.until(
        lambda: all((c.job(j) or {})["spec"]["runPolicy"]["suspend"] for j in ("sp-sft", "sp-rm")),
        "stage jobs suspended",
    )
    await c.until(lambda: _pstatus(c, "sp").get("phase") == "Suspended", "pipeline Suspended")
    _succeed(c, "sp-sft")
    _succeed(c, "sp-rm")
    await asyncio.sleep(0.5)
    assert c.job("sp-ppo") is None  # no new stage while suspended
    c.k8s.patch(PIPELINES, "sp", {"spec": {"suspend": False}}, c.namespace)
    await c.until(lambda: c.job("sp-ppo"), "ppo created after resume")


async def test_restart_mid_pipeline_creates_each_stage_once(cluster: Cluster) -> None:
    c = cluster
    mark = c.k8s.requests.mark()
    async with operator_running():
        created = c.k8s.create(PIPELINES, pipeline("rs"), c.namespace)
        await c.until(lambda: c.ray_jobs("rs-sft"), "stage sft")
        _succeed(c, "rs-sft")
        await c.until(lambda: c.job("rs-rm"), "stage rm")
    uids = {j: (c.job(j) or {})["metadata"]["uid"] for j in ("rs-sft", "rs-rm")}
    _succeed_later = "rs-rm"
    async with operator_running():
        await c.until(lambda: c.ray_jobs(_succeed_later), "rm's RayJob")
        _succeed(c, _succeed_later)
        await c.until(lambda: c.ray_jobs("rs-ppo"), "stage ppo after the restart")
        _succeed(c, "rs-ppo")
        await c.until(lambda: _pstatus(c, "rs").get("phase") == "Succeeded", "Succeeded")
    assert {j: (c.job(j) or {})["metadata"]["uid"] for j in ("rs-sft", "rs-rm")} == uids
    posts = [
        r
        for r in c.k8s.requests.records[mark:]
        if r.verb == "create" and r.resource == "rlhfjobs.rlhf.dev"
    ]
    assert len(posts) == 3, posts
    # Deleting the pipeline deletes its stage jobs (ownerReferences; garbage collection).
    c.k8s.delete(PIPELINES, "rs", c.namespace)
    await c.until(lambda: c.job("rs-sft") is None, "stage jobs collected with the pipeline")
    assert created["metadata"]["uid"]
