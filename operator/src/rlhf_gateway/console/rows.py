"""What the console's job list shows of an RLHFJob (pure): OpenAI's status and model, and the
operator's view of the run (progress, latest reward, GPUs)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..jobview import Status, job_object


class ConsoleJob(BaseModel):
    id: str
    status: Status
    model: str
    fine_tuned_model: str | None
    created_at: int
    finished_at: int | None
    phase: str | None
    step: int
    total_steps: int | None
    progress: str | None
    reward: float | None
    gpus: int | None
    restarts: int
    message: str | None
    metadata: dict[str, str] | None


def console_job(job: dict[str, Any]) -> ConsoleJob:
    status = job.get("status") or {}
    trainer = status.get("trainer") or {}
    obj = job_object(job)
    return ConsoleJob(
        id=obj.id,
        status=obj.status,
        model=obj.model,
        fine_tuned_model=obj.fine_tuned_model,
        created_at=obj.created_at,
        finished_at=obj.finished_at,
        phase=status.get("phase"),
        step=int(trainer.get("step") or 0),
        total_steps=trainer.get("totalSteps"),
        progress=trainer.get("progress"),
        reward=trainer.get("reward"),
        gpus=status.get("totalGpus", (status.get("allocation") or {}).get("totalGpus")),
        restarts=int(status.get("restarts") or 0),
        message=(obj.error.message if obj.error else status.get("message")),
        metadata=obj.metadata,
    )
