"""A job's events, checkpoints and metrics as OpenAI shows them (pure).

Events, newest first: the job's creation, every condition's last transition (phase changes,
with the operator's reason and message), the Kubernetes Events about the RLHFJob, and one
`metrics` event per reported step. Checkpoints: the trainer's saved checkpoints with the
metrics of their step. Ids are stable (derived from what they describe), so `after` cursors
survive re-reads.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel

from .jobview import epoch, fine_tuned_model_id

Level = Literal["info", "warn", "error"]
# metric -> [(step, value)], oldest first.
History = dict[str, list[tuple[int, float]]]


class JobEvent(BaseModel):
    id: str
    object: Literal["fine_tuning.job.event"] = "fine_tuning.job.event"
    created_at: int
    level: Level
    message: str
    type: Literal["message", "metrics"] = "message"
    data: dict[str, Any] | None = None


class Checkpoint(BaseModel):
    id: str
    object: Literal["fine_tuning.job.checkpoint"] = "fine_tuning.job.checkpoint"
    created_at: int
    fine_tuned_model_checkpoint: str
    fine_tuning_job_id: str
    metrics: dict[str, float]
    step_number: int
    location: str


# OpenAI's names for a checkpoint's metrics, beside ours.
_OPENAI_METRICS = {
    "loss": "train_loss",
    "accuracy": "train_mean_token_accuracy",
    "eval/mean_reward": "full_valid_mean_reward",
}


def _checkpoint_metrics(step: int, metrics: dict[str, float]) -> dict[str, float]:
    named = {_OPENAI_METRICS[k]: v for k, v in metrics.items() if k in _OPENAI_METRICS}
    return {"step": float(step), **metrics, **named}


def _id(prefix: str, *parts: object) -> str:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:24]
    return f"{prefix}-{digest}"


def history_of(job: dict[str, Any]) -> History:
    """The trainer's bounded metrics history (`status.trainer.history`: metric -> [[step,
    value], ...], a few hundred points each), with the latest step's metrics added where the
    history does not hold that step yet."""
    trainer = (job.get("status") or {}).get("trainer") or {}
    history: History = {
        str(metric): [(int(step), float(value)) for step, value in points]
        for metric, points in (trainer.get("history") or {}).items()
    }
    step = int(trainer.get("step") or 0)
    for metric, value in (trainer.get("metrics") or {}).items() if step else ():
        points = history.setdefault(metric, [])
        if not points or points[-1][0] < step:
            points.append((step, float(value)))
    return history


def _steps(history: History) -> dict[int, dict[str, float]]:
    steps: dict[int, dict[str, float]] = {}
    for metric, points in history.items():
        for step, value in points:
            steps.setdefault(step, {})[metric] = value
    return steps


def job_events(
    job: dict[str, Any], k8s_events: list[dict[str, Any]], history: History
) -> list[JobEvent]:
    meta, status = job["metadata"], job.get("status") or {}
    name = meta["name"]
    created = epoch(meta.get("creationTimestamp")) or 0
    events = [
        JobEvent(
            id=_id("ftevent", name, "created"),
            created_at=created,
            level="info",
            message="Created fine-tuning job",
        )
    ]
    for cond in status.get("conditions") or []:
        level: Level = "info"
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            level = "error"
        elif cond.get("status") == "False" and cond.get("type") in ("Valid", "ClusterReady"):
            level = "warn"
        text = f"{cond.get('type')}={cond.get('status')} ({cond.get('reason')})"
        if cond.get("message"):
            text += f": {cond['message']}"
        events.append(
            JobEvent(
                id=_id("ftevent", name, "cond", cond.get("type"), cond.get("lastTransitionTime")),
                created_at=epoch(cond.get("lastTransitionTime")) or created,
                level=level,
                message=text,
            )
        )
    for ev in k8s_events:
        when = (
            ev.get("lastTimestamp")
            or ev.get("eventTime")
            or ev["metadata"].get("creationTimestamp")
        )
        events.append(
            JobEvent(
                id=_id("ftevent", name, "k8s", ev["metadata"].get("uid") or ev["metadata"]["name"]),
                created_at=epoch(when) or created,
                level="warn" if ev.get("type") == "Warning" else "info",
                message=f"{ev.get('reason', '')}: {ev.get('message', '')}",
            )
        )
    updated = epoch((status.get("trainer") or {}).get("updatedAt")) or created
    total = (status.get("trainer") or {}).get("totalSteps")
    for step, metrics in sorted(_steps(history).items()):
        shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()))
        events.append(
            JobEvent(
                id=_id("ftevent", name, "step", step),
                created_at=updated,
                level="info",
                type="metrics",
                message=f"Step {step}{f'/{total}' if total else ''}: {shown}",
                data={"step": step, **metrics},
            )
        )
    if (model := fine_tuned_model_id(job)) is not None:
        events.append(
            JobEvent(
                id=_id("ftevent", name, "model"),
                created_at=epoch(status.get("completionTime")) or updated,
                level="info",
                message=f"New fine-tuned model created: {model}",
            )
        )
    # Newest first; within one second, the order they happened in (creation, then conditions,
    # events, steps, the model), reversed.
    order = {id(e): i for i, e in enumerate(events)}
    return sorted(events, key=lambda e: (e.created_at, order[id(e)]), reverse=True)


def job_checkpoints(job: dict[str, Any], history: History) -> list[Checkpoint]:
    meta = job["metadata"]
    steps = _steps(history)
    trainer = (job.get("status") or {}).get("trainer") or {}
    model = fine_tuned_model_id(job) or f"ft:{meta['name']}"
    out = [
        Checkpoint(
            id=_id("ftckpt", meta["name"], ckpt["step"]),
            created_at=epoch(ckpt.get("time")) or epoch(meta.get("creationTimestamp")) or 0,
            fine_tuned_model_checkpoint=f"{model}:ckpt-step-{ckpt['step']}",
            fine_tuning_job_id=meta["name"],
            metrics=_checkpoint_metrics(int(ckpt["step"]), steps.get(int(ckpt["step"]), {})),
            step_number=int(ckpt["step"]),
            location=str(ckpt.get("path", "")),
        )
        for ckpt in trainer.get("checkpoints") or []
    ]
    return sorted(out, key=lambda c: c.step_number, reverse=True)


def page(items: list[Any], after: str | None, limit: int) -> tuple[list[Any], bool]:
    """OpenAI's cursor pages: the items after the one with id `after`, at most `limit`."""
    if after is not None:
        ids = [i.id for i in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    return items[:limit], len(items) > limit
