"""A job through its life with the real operator (kopf) behind the gateway: the test plays
KubeRay and the trainer, as operator/tests/emulated does; the tenant watches it all through
the openai SDK (status, events, checkpoints, metrics, its fine-tuned model)."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import openai
import pytest
import yaml

from emulated.harness import Cluster, operator_running
from emulator.harness import project_crds

from .harness import Service, gateway_service
from .test_gateway_files import SFT_ROWS
from .test_gateway_graders import PYTHON_GRADER, ROWS
from .test_gateway_jobs import upload


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
async def running(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Service]:
    crds = project_crds()
    if len(crds) < 2:
        pytest.skip("KUBERAY CRDS ABSENT: the operator needs RayJobs (../shared/kuberay-crds)")
    async with gateway_service(tmp_path, crds=crds) as service:
        admin = service.security.add_user("operator", ["system:masters"])
        kubeconfig = service.emulator.write_kubeconfig(
            tmp_path / "operator-kubeconfig", token=admin
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        async with operator_running():
            yield service


async def test_a_tenant_follows_its_job_to_a_fine_tuned_model(running: Service) -> None:
    client = running.client("team-a")
    # RL on a grader the tenant wrote (the operator accepts it and runs it as GRPO).
    job = await client.fine_tuning.jobs.create(
        model="tiny-llama-random",
        training_file=await upload(client, ROWS),
        suffix="letters",
        method={"type": "reinforcement", "reinforcement": {"grader": PYTHON_GRADER}},  # type: ignore[typeddict-item]
    )
    cluster = Cluster(running.emulator, "team-a")
    await cluster.until(lambda: cluster.ray_jobs(job.id), "RayJob created")
    # The job's first status follows its RayJob's watch event (one patch, not a stale Pending).
    await cluster.until(lambda: cluster.status(job.id).get("phase"), "the job's first status")
    # What the trainer will read: the tenant's grader as the reward, its rows as they are.
    config = yaml.safe_load(
        running.emulator.get("configmaps", f"{job.id}-config", "team-a")["data"]["job.yaml"]
    )
    assert config["models"]["graderReward"]["grader"]["source"] == PYTHON_GRADER["source"]
    assert (config["algorithm"]["name"], config["data"]["format"]) == ("grpo", "openai")
    assert (await client.fine_tuning.jobs.retrieve(job.id)).status == "queued"

    cluster.kuberay(f"{job.id}-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await cluster.phase(job.id, "Running")
    cluster.trainer_reports(
        job.id,
        {
            "step": 8,
            "totalSteps": 16,
            "progress": "8/16",
            "metrics": {"loss": 1.5},
            "checkpoints": [{"step": 8, "path": "/checkpoints/step-8"}],
            "updatedAt": now(),
            "etaSeconds": 60,
        },
    )
    await cluster.until(
        lambda: (cluster.status(job.id).get("trainer") or {}).get("step") == 8, "step 8 mirrored"
    )
    seen = await client.fine_tuning.jobs.retrieve(job.id)
    assert seen.status == "running" and seen.estimated_finish is not None
    checkpoints = (await client.fine_tuning.jobs.checkpoints.list(job.id)).data
    assert [(c.step_number, c.metrics.train_loss if c.metrics else None) for c in checkpoints] == [
        (8, 1.5)
    ]
    assert (
        checkpoints[0].model_extra
        and checkpoints[0].model_extra["location"] == "/checkpoints/step-8"
    )
    async with openai.AsyncOpenAI(
        base_url=f"{running.url}/v1", api_key=running.tokens["team-a"]
    ) as raw:
        metrics = await raw.get(f"/fine_tuning/jobs/{job.id}/metrics", cast_to=dict)
    assert metrics["metrics"] == {"loss": [[8, 1.5]]}

    cluster.kuberay(
        f"{job.id}-r0",
        jobDeploymentStatus="Complete",
        jobStatus="SUCCEEDED",
        endTime=now(),
    )
    await cluster.phase(job.id, "Succeeded")
    done = await client.fine_tuning.jobs.retrieve(job.id)
    assert done.status == "succeeded"
    assert done.fine_tuned_model == f"ft:tiny-llama-random:team-a:letters:{job.id}"
    assert done.finished_at is not None
    events = [e.message for e in (await client.fine_tuning.jobs.list_events(job.id, limit=50)).data]
    assert events[-1] == "Created fine-tuning job"
    assert any(m.startswith("Step 8/16: loss=1.5") for m in events)
    assert any("Complete=True (JobSucceeded)" in m for m in events)
    assert f"New fine-tuned model created: {done.fine_tuned_model}" in events
    assert any(m.startswith("Created:") or m.startswith("Succeeded:") for m in events)  # k8s Events

    models = [m.id for m in (await client.models.list()).data]
    assert done.fine_tuned_model in models
    assert (await client.models.retrieve(done.fine_tuned_model)).owned_by == "team-a"
    other = running.client("team-b")
    assert done.fine_tuned_model not in [m.id for m in (await other.models.list()).data]
    with pytest.raises(openai.NotFoundError):
        await other.models.retrieve(done.fine_tuned_model)
    with pytest.raises(openai.NotFoundError):
        await other.models.delete(done.fine_tuned_model)

    # A new job may start from the fine-tuned model: it names it with fromJob.
    again = await client.fine_tuning.jobs.create(
        model=done.fine_tuned_model, training_file=await upload(client, SFT_ROWS)
    )
    spec = running.emulator.get("rlhfjobs.rlhf.dev", again.id, "team-a")["spec"]
    assert (
        spec["models"]["actor"] == {"fromJob": job.id, "trustRemoteCode": False}
        or spec["models"]["actor"].get("fromJob") == job.id
    )

    assert (await client.models.delete(done.fine_tuned_model)).deleted
    assert done.fine_tuned_model not in [m.id for m in (await client.models.list()).data]
