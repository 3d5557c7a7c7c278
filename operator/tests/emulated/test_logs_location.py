"""status.output.logs names where the job's logs are kept, from the first attempt on (a failed
or retried job's logs matter most), through a retry whose pods write to attempt-1, to the
end; the results join it only once the job succeeded. The emulator stores status under our
CRD's schema, so a field the CRD lacked would be pruned."""

from __future__ import annotations

from typing import Any

from .harness import Cluster, ppo_manifest

LOGS = "pvc://ppo-l-checkpoints/ppo-l/logs"


def _env(ray_job: dict[str, Any]) -> dict[str, Any]:
    head = ray_job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    return {e["name"]: e.get("value") for e in head["containers"][0]["env"]}


async def test_status_names_the_logs_of_every_attempt(operator: Cluster) -> None:
    c = operator
    c.create(ppo_manifest("ppo-l", runPolicy={"backoffLimit": 1}))
    await c.until(lambda: c.ray_jobs("ppo-l"), "first RayJob")
    [attempt0] = c.ray_jobs("ppo-l")
    assert _env(attempt0)["RLHF_LOGS_DIR"] == "/storage/ppo-l/logs/attempt-0"
    c.kuberay("ppo-l-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    status = await c.phase("ppo-l", "Running")
    assert status["output"] == {"logs": LOGS}  # no results yet

    c.kuberay("ppo-l-r0", jobDeploymentStatus="Failed", jobStatus="FAILED", message="OOMKilled")
    await c.until(
        lambda: [r["metadata"]["name"] for r in c.ray_jobs("ppo-l")] == ["ppo-l-r1"],
        "attempt 1 replaces attempt 0",
    )
    [attempt1] = c.ray_jobs("ppo-l")
    assert _env(attempt1)["RLHF_LOGS_DIR"] == "/storage/ppo-l/logs/attempt-1"
    status = await c.until(lambda: (s := c.status("ppo-l")).get("restarts") == 1 and s, "retry")
    assert status["output"] == {"logs": LOGS}

    c.kuberay("ppo-l-r1", jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")
    status = await c.phase("ppo-l", "Succeeded")
    assert status["output"]["logs"] == LOGS
    assert status["output"]["model"] == "pvc://ppo-l-checkpoints/ppo-l/output/final/actor"
