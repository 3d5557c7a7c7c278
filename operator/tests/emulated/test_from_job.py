"""Jobs that build on jobs (`fromJob`), against the real operator on the emulator: the consumer
waits (nothing created), proceeds with the producer's exact output location once it
succeeded, fails when it failed, and records (and pins) its inputs on status."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import yaml

from .harness import Cluster, ppo_manifest

SFT_OUTPUT = "pvc://sft-a-checkpoints/sft-a/output/final"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sft(name: str) -> dict[str, Any]:
    body = ppo_manifest(name)
    body["spec"]["algorithm"] = {"name": "sft"}
    body["spec"]["models"] = {"actor": {"pretrained": "org/base"}}
    body["spec"]["data"] = {"train": [{"hfId": "org/sft"}]}
    body["spec"]["training"] = {"trainBatchSize": 32, "microTrainBatchSize": 1}
    return body


def _consumer(name: str, producer: str) -> dict[str, Any]:
    body = ppo_manifest(name)
    body["spec"]["models"]["actor"] = {"fromJob": producer}
    return body


def _job_yaml(c: Cluster, job: str) -> dict[str, Any]:
    config_map = c.k8s.get("configmaps", f"{job}-config", c.namespace)
    loaded: dict[str, Any] = yaml.safe_load(config_map["data"]["job.yaml"])
    return loaded


async def test_waits_then_proceeds_with_the_exact_output(operator: Cluster) -> None:
    c = operator
    c.create(_consumer("ppo-b", "sft-a"))
    await c.until(
        lambda: c.conditions("ppo-b").get("InputsReady") == ("False", "WaitingForJob"),
        "waiting for a job that does not exist",
    )
    assert "RLHFJob sft-a, which does not exist" in c.status("ppo-b")["message"]
    assert c.status("ppo-b")["phase"] == "Pending"
    producer = c.create(_sft("sft-a"))
    await c.until(lambda: c.ray_jobs("sft-a"), "producer's RayJob")
    await c.until(
        lambda: "to succeed (it is Provisioning)" in c.status("ppo-b").get("message", ""),
        "consumer says the producer's phase",
    )
    await asyncio.sleep(0.5)
    assert c.children("ppo-b") == {}  # nothing of the Ray cluster, nor of anything else
    c.kuberay("sft-a-r0", jobDeploymentStatus="Complete", jobStatus="SUCCEEDED", endTime=_now())
    await c.phase("sft-a", "Succeeded")
    assert c.status("sft-a")["output"]["model"] == SFT_OUTPUT
    await c.until(lambda: c.ray_jobs("ppo-b"), "consumer's RayJob once the producer succeeded")
    config = _job_yaml(c, "ppo-b")
    assert config["models"]["actor"] == {
        "pretrained": "/inputs/pvc/sft-a-checkpoints/sft-a/output/final",
        "trustRemoteCode": False,
    }
    status = await c.phase("ppo-b", "Provisioning")
    assert status["inputs"] == [
        {
            "role": "actor",
            "fromJob": "sft-a",
            "uid": producer["metadata"]["uid"],
            "model": SFT_OUTPUT,
        }
    ]
    assert c.conditions("ppo-b")["InputsReady"] == ("True", "InputsResolved")
    await c.until(lambda: "InputsResolved" in c.reasons("ppo-b"), "InputsResolved event")
    assert c.reasons("ppo-b")[0] == "WaitingForJob"

    # Pinned: the producer deleted changes nothing (the consumer is looked at again).
    c.k8s.delete("rlhfjobs.rlhf.dev", "sft-a", c.namespace)
    await c.until(lambda: c.job("sft-a") is None, "producer gone")
    await asyncio.sleep(0.7)
    assert c.status("ppo-b")["inputs"][0]["uid"] == producer["metadata"]["uid"]
    assert c.status("ppo-b")["phase"] == "Provisioning"


async def test_fails_when_the_producer_failed(operator: Cluster) -> None:
    c = operator
    c.create(_sft("sft-f"))
    c.create(_consumer("ppo-f", "sft-f"))
    await c.until(lambda: c.ray_jobs("sft-f"), "producer's RayJob")
    why = "data.train[0].inputKey: no column 'prompt'"
    c.fails_for_good("sft-f", why)
    await c.phase("sft-f", "Failed")
    status = await c.phase("ppo-f", "Failed")
    assert c.conditions("ppo-f")["Failed"] == ("True", "InputJobFailed")
    assert c.conditions("ppo-f")["InputsReady"] == ("False", "InputJobFailed")
    assert "spec.models.actor.fromJob: RLHFJob sft-f failed" in status["message"]
    assert why in status["message"]
    assert c.children("ppo-f") == {}
    await c.until(lambda: "InputJobFailed" in c.reasons("ppo-f"), "InputJobFailed event")
