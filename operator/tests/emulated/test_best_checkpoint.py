"""checkpoint.keepBest on a cluster: the trainer's report names the best checkpoint (built
with the trainer's own report functions), the operator mirrors it on status.trainer.best and,
once the job succeeded, names its exported model on status.output.best."""

from __future__ import annotations

from pathlib import Path

from rlhf_trainer.checkpoint_best import BestCheckpoint
from rlhf_trainer.reporting.base import StepReport
from rlhf_trainer.reporting.kube import best_status, trainer_status

from .harness import Cluster, ppo_manifest


def report(step: int, best: BestCheckpoint, checkpoints: list[int]) -> dict[str, object]:
    """What `KubeReporter` sends after `step` (its pure body builder)."""
    metrics = {"reward": 0.5, "eval/pass@1": best.score, "eval/prompts": 2.0}
    step_report = StepReport(step, 8, metrics, {}, 8, None, None)
    saved = [{"step": s, "path": f"/storage/job/checkpoints/step-{s:06d}"} for s in checkpoints]
    return trainer_status(step_report, saved, "2026-12-02T01:00:00Z", best=best_status(best))


async def test_the_best_checkpoint_is_on_the_status(operator: Cluster) -> None:
    c = operator
    c.create(
        ppo_manifest(
            "ppo-best",
            data={"eval": [{"hfId": "org/eval-prompts"}]},
            training={"evalEverySteps": 2},
            checkpoint={"keep": 1, "keepBest": {"metric": "eval/pass@1", "mode": "max"}},
        )
    )
    await c.until(lambda: c.ray_jobs("ppo-best"), "RayJob created")
    c.kuberay("ppo-best-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await c.phase("ppo-best", "Running")

    # Step 2 scored 0.75, better than anything after it: keep: 1 would have deleted it by
    # step 8, keepBest keeps it beside the newest.
    best = BestCheckpoint(2, Path("/storage/ppo-best/checkpoints/step-000002"), "eval/pass@1", 0.75)
    c.trainer_reports("ppo-best", report(8, best, [2, 8]))
    trainer = await c.until(
        lambda: (t := c.status("ppo-best").get("trainer")) and t.get("best") and t,
        "status.trainer.best",
    )
    assert trainer["best"] == {
        "step": 2,
        "metric": "eval/pass@1",
        "score": 0.75,
        "checkpoint": "/storage/ppo-best/checkpoints/step-000002",
    }
    assert [cp["step"] for cp in trainer["checkpoints"]] == [2, 8]
    # The results (the best model among them) are named once the job succeeded.
    assert "best" not in c.status("ppo-best").get("output", {})

    c.kuberay(
        "ppo-best-r0",
        jobDeploymentStatus="Complete",
        jobStatus="SUCCEEDED",
        endTime="2026-12-02T01:05:00Z",
    )
    status = await c.phase("ppo-best", "Succeeded")
    base = "pvc://ppo-best-checkpoints/ppo-best/output"
    assert status["output"]["model"] == f"{base}/final/actor"
    assert status["output"]["best"] == {
        "model": f"{base}/best/actor",
        "step": 2,
        "metric": "eval/pass@1",
        "score": 0.75,
    }
