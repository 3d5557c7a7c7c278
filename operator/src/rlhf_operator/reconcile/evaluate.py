"""An RLHFJob's status, computed in one place from what was observed (pure).

The run policy lives here as a small state machine over the current attempt's RayJob:

- succeeded                          -> Succeeded (terminal)
- failed, classed by `diagnosis.classify` (the trainer's outcome for that attempt, else the
  exit code in KubeRay's message; Infrastructure when neither says within a few seconds):
  - InvalidSpec                      -> Failed/NotRetryable (terminal: a retry cannot fix it)
  - Preempted                        -> restarts + 1 and preemptions + 1: a fresh RayJob
                                        resumes from the latest checkpoint; not counted
                                        against backoffLimit
  - Infrastructure, restarts - preemptions < backoffLimit
                                     -> restarts + 1 (Restarted=True says why)
  - Infrastructure, backoffLimit reached -> Failed/BackoffLimitExceeded (terminal)
  - its pods were disrupted (Disrupted=True, from their DisruptionTarget condition) and the
    trainer did not say, or blamed the infrastructure -> Preempted
- disrupted, and the trainer reported how the attempt ended -> as failed (KubeRay would
                                        recreate the lost pods and may submit the job again)
- running longer than the deadline   -> Failed/DeadlineExceeded (terminal)
- pods not all running startupTimeoutSeconds after the attempt started provisioning
                                     -> Failed/StartupTimeout (terminal); until then
                                        ClusterReady=False carries the pods' troubles
- otherwise                          -> Pending/Provisioning/Running/Suspended from KubeRay's
                                        jobDeploymentStatus

`status.trainer` mirrors the trainer's validated report (its ConfigMap, observed.py): read
here (Checkpointed, outcome) and written back as it is. The
operator's actions (create the attempt's RayJob, delete finished ones, TTL) follow from the
computed status in `reconcile.decide`; `evaluate` also says when time alone will change it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rlhf_trainer.config import Device

from ..api.v1alpha1 import (
    Allocation,
    ConditionReason,
    ConditionType,
    JobOutput,
    Phase,
    RLHFJob,
    RLHFJobStatus,
    TrainerReport,
)
from ..builders.common import ray_job_name
from ..builders.volumes import job_logs, job_output
from .conditions import (
    STOPPING_FAILURES,
    TERMINAL_FAILURES,
    Conditions,
    F,
    R,
    T,
    format_time,
    is_finished,
    parse_time,
)
from .diagnosis import bounded
from .observed import Observed
from .run_policy import Machine, ray_job_ref

__all__ = [
    "STOPPING_FAILURES",
    "TERMINAL_FAILURES",
    "Evaluation",
    "evaluate",
    "format_time",
    "invalid_status",
    "is_finished",
    "parse_time",
]


def _generation(job: RLHFJob) -> int | None:
    value = job.metadata.get("generation")
    return int(value) if value is not None else None


def _checkpointed(conds: Conditions, report: TrainerReport | None) -> None:
    if report is not None and report.checkpoints:
        last = max(report.checkpoints, key=lambda c: c.step)
        conds.set(
            ConditionType.CHECKPOINTED, T, R.CHECKPOINT_SAVED, f"step {last.step}: {last.path}"
        )
    else:
        conds.set(ConditionType.CHECKPOINTED, F, R.NO_CHECKPOINT, "no checkpoint yet")


@dataclass(frozen=True)
class Evaluation:
    status: RLHFJobStatus
    # When time alone changes the status (a startup timeout, the trainer's outcome overdue).
    wake_at: datetime | None = None


def _children_applied(conds: Conditions, observed: Observed) -> None:
    if observed.conflicts:
        taken = "; ".join(observed.conflicts)
        message = f"left untouched, not this job's: {taken}. {CONFLICT_HINT}"
        conds.set(ConditionType.CHILDREN_APPLIED, F, R.CHILD_CONFLICT, bounded(message))
    elif observed.apply_failures:
        summaries = "; ".join(f.summary for f in observed.apply_failures)
        conds.set(ConditionType.CHILDREN_APPLIED, F, R.CHILD_APPLY_FAILED, bounded(summaries))
    else:
        conds.set(ConditionType.CHILDREN_APPLIED, T, R.CHILDREN_APPLIED, "")


CONFLICT_HINT = (
    "Delete or rename it (a PVC kept from an earlier job with this name can be reused as "
    "spec.checkpoint.storage.claimName), or rename the RLHFJob"
)


def evaluate(
    job: RLHFJob,
    allocation: Allocation,
    observed: Observed,
    trainer_report: TrainerReport | None,
    now: datetime,
) -> Evaluation:
    """The status of a valid job (parsed and placed once for the pass: `allocation` is its
    plan). `job.status` is the previous status."""
    prev = job.status or RLHFJobStatus()
    generation = _generation(job)
    conds = Conditions(prev.conditions, now, generation)
    conds.set(ConditionType.VALID, T, R.SPEC_VALID, "")
    failed_before = conds.get(ConditionType.FAILED)
    if failed_before is not None and failed_before.reason not in TERMINAL_FAILURES:
        conds.set(ConditionType.FAILED, F, R.SPEC_VALID, "the spec was fixed")
    _checkpointed(conds, trainer_report)
    gpus = allocation.total_gpus if allocation.device is Device.GPU else 0
    base = prev.model_copy(
        update={
            "observed_generation": generation,
            "allocation": allocation,
            "total_gpus": gpus,
            "trainer": trainer_report,
        }
    )
    if is_finished(prev):
        current = observed.attempt(prev.restarts)
        ray_job = ray_job_ref(ray_job_name(job.name, prev.restarts), current)
        status = base.model_copy(update={"conditions": conds.as_list(), "ray_job": ray_job})
        return Evaluation(_with_output(job, status))
    _children_applied(conds, observed)
    machine = Machine(job, observed, trainer_report, conds, now)
    status = base.model_copy(update=machine.run(prev, gpus))
    return Evaluation(_with_output(job, status), machine.wake_at)


def _with_output(job: RLHFJob, status: RLHFJobStatus) -> RLHFJobStatus:
    """`status.output`: its logs from the first attempt on (a failed job's matter most), all
    of its results once the job succeeded: they exist then, and stay."""
    output = None
    if status.phase is Phase.SUCCEEDED:
        output = job_output(job, status.trainer.best if status.trainer else None)
    elif status.ray_job is not None:
        output = JobOutput(logs=job_logs(job), uploaded=job.spec.output.uri)
    return status.model_copy(update={"output": output})


def invalid_status(
    previous: RLHFJobStatus | None,
    *,
    generation: int | None,
    reason: ConditionReason,
    message: str,
    has_ray_job: bool,
    now: datetime,
) -> RLHFJobStatus:
    """Valid=False with the field-level message. A job that never ran is Failed (nothing to
    retry until the spec changes); a running one keeps running on its last valid spec."""
    prev = previous or RLHFJobStatus()
    conds = Conditions(prev.conditions, now, generation)
    conds.set(ConditionType.VALID, F, reason, message)
    update: dict[str, object] = {"observed_generation": generation, "message": message}
    if not has_ray_job and not is_finished(prev):
        conds.set(ConditionType.FAILED, T, reason, message)
        update["phase"] = Phase.FAILED
    update["conditions"] = conds.as_list()
    return prev.model_copy(update=update)
