"""An RLHFJob as OpenAI's fine-tuning job object (pure).

Status: `cancelled` once the gateway cancelled it (annotation), else from the phase: Succeeded
-> succeeded, Failed -> failed (with the job's reason), suspended -> paused, Running ->
running, Pending/Provisioning -> queued once the spec was found valid (validating_files
before). A fine-tuned model's id is `ft:<base>:<tenant>:<suffix>:<job id>`; the job id is the
RLHFJob's name.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from rlhf_trainer.config import AlgorithmName

from .jobrequest import METADATA_ANNOTATION, REQUEST_ANNOTATION

CANCELLED_ANNOTATION = "rlhf.dev/cancelled-at"
SUSPENDED_BY_USER = "SuspendedByUser"  # the operator's Suspended condition reason
MODEL_DELETED_ANNOTATION = "rlhf.dev/model-deleted-at"
JOB_PREFIX = "ftjob-"
Status = Literal[
    "validating_files", "queued", "running", "succeeded", "failed", "cancelled", "paused"
]
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


class JobError(BaseModel):
    code: str
    message: str
    param: str | None = None


class JobHyperparameters(BaseModel):
    n_epochs: int | str = "auto"
    batch_size: int | str = "auto"
    learning_rate_multiplier: float | str = "auto"
    beta: float | str | None = None
    eval_interval: int | str | None = None
    eval_samples: int | str | None = None
    compute_multiplier: float | str | None = None


class FineTuningJob(BaseModel):
    id: str
    object: Literal["fine_tuning.job"] = "fine_tuning.job"
    created_at: int
    error: JobError | None = None
    fine_tuned_model: str | None = None
    finished_at: int | None = None
    hyperparameters: JobHyperparameters
    model: str
    organization_id: str
    result_files: list[str] = []
    seed: int
    status: Status
    trained_tokens: int | None = None
    training_file: str
    validation_file: str | None = None
    estimated_finish: int | None = None
    integrations: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None
    method: dict[str, Any] | None = None


def epoch(timestamp: str | None) -> int | None:
    if not timestamp:
        return None
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp())


def _conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in (job.get("status") or {}).get("conditions") or []}


def job_status(job: dict[str, Any]) -> Status:
    annotations = job["metadata"].get("annotations") or {}
    if CANCELLED_ANNOTATION in annotations:
        return "cancelled"
    status = job.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return "succeeded"
    if phase == "Failed" or _conditions(job).get("Valid", {}).get("status") == "False":
        return "failed"
    if ((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"):
        return "paused"
    if phase == "Suspended":
        # Resumed by the tenant (spec no longer suspended), not yet started again by the
        # operator: queued. Held for another reason (a guardrail, a queue): still paused.
        suspended = _conditions(job).get("Suspended", {})
        return "queued" if suspended.get("reason") == SUSPENDED_BY_USER else "paused"
    if phase == "Running":
        return "running"
    if _conditions(job).get("Valid", {}).get("status") == "True":
        return "queued"
    return "validating_files"


def job_error(job: dict[str, Any]) -> JobError | None:
    if job_status(job) != "failed":
        return None
    status = job.get("status") or {}
    conditions = _conditions(job)
    failed = conditions.get("Failed") or conditions.get("Valid") or {}
    reason = failed.get("reason") or "JobFailed"
    message = failed.get("message") or status.get("message") or "The job failed."
    return JobError(code=str(reason), message=str(message))


def asked(job: dict[str, Any]) -> dict[str, Any]:
    raw = (job["metadata"].get("annotations") or {}).get(REQUEST_ANNOTATION) or "{}"
    value: dict[str, Any] = json.loads(raw)
    return value


def fine_tuned_model_id(job: dict[str, Any]) -> str | None:
    """The model's id once the job succeeded with a model (and it was not deleted)."""
    status = job.get("status") or {}
    annotations = job["metadata"].get("annotations") or {}
    if status.get("phase") != "Succeeded" or not (status.get("output") or {}).get("model"):
        return None
    if MODEL_DELETED_ANNOTATION in annotations:
        return None
    request = asked(job)
    base = base_model_of(str(request.get("model", "")))
    meta = job["metadata"]
    return f"ft:{base}:{meta['namespace']}:{request.get('suffix') or ''}:{meta['name']}"


def base_model_of(model: str) -> str:
    """The catalog id behind a model id (a fine-tuned model's base, recursively)."""
    return model.split(":")[1] if model.startswith("ft:") and model.count(":") == 4 else model


def job_of_model(model: str) -> str | None:
    """The job id (RLHFJob name) of a fine-tuned model id, or None for other ids."""
    parts = model.split(":")
    if len(parts) == 5 and parts[0] == "ft" and parts[4].startswith(JOB_PREFIX):
        return parts[4]
    return None


def _trained_tokens(trainer: dict[str, Any]) -> int | None:
    metrics = trainer.get("metrics") or {}
    for key in ("trained_tokens", "tokens", "train/tokens"):
        if key in metrics:
            return int(metrics[key])
    return None


def effective_hyperparameters(spec: dict[str, Any]) -> dict[str, Any]:
    """What the job runs with where the request said nothing (or "auto"): the spec's
    epochs and batch size, as OpenAI reports the values it chose."""
    training = spec.get("training") or {}
    name = (spec.get("algorithm") or {}).get("name")
    online = name in {a.value for a in AlgorithmName if a.is_online}
    epochs = training.get("numEpisodes") if online else training.get("epochs")
    out: dict[str, Any] = {}
    if epochs is not None:
        out["n_epochs"] = epochs
    if training.get("trainBatchSize") is not None:
        out["batch_size"] = training["trainBatchSize"]
    return out


def job_object(job: dict[str, Any]) -> FineTuningJob:
    meta, status = job["metadata"], job.get("status") or {}
    trainer = status.get("trainer") or {}
    request = asked(job)
    state = job_status(job)
    finished = epoch(status.get("completionTime")) if state in FINISHED else None
    if state == "cancelled":
        finished = epoch((meta.get("annotations") or {}).get(CANCELLED_ANNOTATION))
    estimated = None
    if state == "running" and trainer.get("etaSeconds") is not None and trainer.get("updatedAt"):
        estimated = int((epoch(trainer["updatedAt"]) or 0) + float(trainer["etaSeconds"]))
    hp = {
        **effective_hyperparameters(job.get("spec") or {}),
        **{k: v for k, v in (request.get("hyperparameters") or {}).items() if v is not None},
    }
    method_params = request.get("method_params")
    return FineTuningJob(
        id=meta["name"],
        created_at=epoch(meta.get("creationTimestamp")) or 0,
        error=job_error(job),
        fine_tuned_model=fine_tuned_model_id(job),
        finished_at=finished,
        hyperparameters=JobHyperparameters(**hp),
        model=str(request.get("model", "")),
        organization_id=meta["namespace"],
        result_files=[],
        seed=int(
            request.get("seed") or ((job.get("spec") or {}).get("training") or {}).get("seed", 42)
        ),
        status=state,
        trained_tokens=_trained_tokens(trainer),
        training_file=str(request.get("training_file", "")),
        validation_file=request.get("validation_file"),
        estimated_finish=estimated,
        metadata=json.loads((meta.get("annotations") or {}).get(METADATA_ANNOTATION) or "{}")
        or None,
        method=method_params or {"type": request.get("method", "supervised")},
    )
