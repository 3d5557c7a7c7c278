"""An RLHFJob's status, computed in one place from what was observed (pure).

The run policy lives here as a small state machine over the current attempt's RayJob:

- succeeded                          -> Succeeded (terminal)
- failed, restarts < backoffLimit    -> restarts + 1: the next attempt is a fresh RayJob that
                                        resumes from the latest checkpoint (Restarted=True says
                                        why the last one failed)
- failed, backoffLimit reached       -> Failed/BackoffLimitExceeded (terminal)
- running longer than the deadline   -> Failed/DeadlineExceeded (terminal)
- otherwise                          -> Pending/Provisioning/Running/Suspended from KubeRay's
                                        jobDeploymentStatus

`status.trainer` is the trainer's: read here (Checkpointed), never written. The operator's
actions (create the attempt's RayJob, delete finished ones, TTL) follow from the computed
status in `reconcile.decide`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rlhf_trainer.config import Device

from .api.v1alpha1 import (
    Condition,
    ConditionReason,
    ConditionStatus,
    ConditionType,
    Phase,
    RayJobRef,
    RLHFJob,
    RLHFJobStatus,
    TrainerReport,
)
from .builders.common import ray_job_name
from .observed import DeploymentStatus, Observed, RayJobObservation
from .placement import plan

T, F = ConditionStatus.TRUE, ConditionStatus.FALSE
R = ConditionReason

# Failed for one of these reasons is final; Failed for an invalid spec recovers when fixed.
TERMINAL_FAILURES = {R.JOB_FAILED, R.BACKOFF_LIMIT_EXCEEDED, R.DEADLINE_EXCEEDED}
_ORDER = list(ConditionType)
_IN_PROGRESS = {
    DeploymentStatus.NEW,
    DeploymentStatus.INITIALIZING,
    DeploymentStatus.WAITING,
    DeploymentStatus.RETRYING,
}


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class Conditions:
    """The previous conditions, updated in place; lastTransitionTime moves only when a
    condition's status changes."""

    def __init__(self, previous: list[Condition], now: datetime, generation: int | None) -> None:
        self._previous = {c.type: c for c in previous}
        self._current = dict(self._previous)
        self._now = format_time(now)
        self._generation = generation

    def get(self, kind: ConditionType) -> Condition | None:
        return self._current.get(kind)

    def set(
        self,
        kind: ConditionType,
        status: ConditionStatus,
        reason: ConditionReason,
        message: str = "",
    ) -> None:
        old = self._previous.get(kind)
        since = old.last_transition_time if old is not None and old.status is status else self._now
        self._current[kind] = Condition(
            type=kind,
            status=status,
            reason=reason,
            message=message,
            last_transition_time=since,
            observed_generation=self._generation,
        )

    def drop(self, kind: ConditionType) -> None:
        self._current.pop(kind, None)

    def as_list(self) -> list[Condition]:
        return sorted(self._current.values(), key=lambda c: _ORDER.index(c.type))


def is_finished(status: RLHFJobStatus | None) -> bool:
    """Succeeded, or Failed for a reason a spec edit cannot undo."""
    if status is None:
        return False
    by_type = {c.type: c for c in status.conditions}
    complete, failed = by_type.get(ConditionType.COMPLETE), by_type.get(ConditionType.FAILED)
    if complete is not None and complete.status is T:
        return True
    return failed is not None and failed.status is T and failed.reason in TERMINAL_FAILURES


def _generation(job: RLHFJob) -> int | None:
    value = job.metadata.get("generation")
    return int(value) if value is not None else None


def _ray_job_ref(name: str, current: RayJobObservation | None) -> RayJobRef:
    if current is None:
        return RayJobRef(name=name)
    return RayJobRef(
        name=current.name,
        ray_cluster_name=current.cluster_name,
        job_id=current.job_id,
        job_deployment_status=str(current.deployment_status) or None,
        job_status=str(current.job_status) or None,
        dashboard_url=current.dashboard_url,
        message=current.message,
    )


def _checkpointed(conds: Conditions, report: TrainerReport | None) -> None:
    if report is not None and report.checkpoints:
        last = max(report.checkpoints, key=lambda c: c.step)
        conds.set(
            ConditionType.CHECKPOINTED, T, R.CHECKPOINT_SAVED, f"step {last.step}: {last.path}"
        )
    else:
        conds.set(ConditionType.CHECKPOINTED, F, R.NO_CHECKPOINT, "no checkpoint yet")


def compute_status(
    job: RLHFJob, observed: Observed, trainer_report: TrainerReport | None, now: datetime
) -> RLHFJobStatus:
    """The status of a valid job (the spec parsed and placement succeeded: `plan` is pure and
    called again here). `job.status` is the previous status."""
    prev = job.status or RLHFJobStatus()
    generation = _generation(job)
    allocation = plan(job.spec)
    conds = Conditions(prev.conditions, now, generation)
    conds.set(ConditionType.VALID, T, R.SPEC_VALID, "")
    failed_before = conds.get(ConditionType.FAILED)
    if failed_before is not None and failed_before.reason not in TERMINAL_FAILURES:
        conds.set(ConditionType.FAILED, F, R.SPEC_VALID, "the spec was fixed")
    _checkpointed(conds, trainer_report)
    base = prev.model_copy(
        update={
            "observed_generation": generation,
            "allocation": allocation,
            "total_gpus": allocation.total_gpus if allocation.device is Device.GPU else 0,
            "trainer": trainer_report,
        }
    )
    if is_finished(prev):
        current = observed.attempt(prev.restarts)
        ray_job = _ray_job_ref(ray_job_name(job.name, prev.restarts), current)
        return base.model_copy(update={"conditions": conds.as_list(), "ray_job": ray_job})
    machine = _Machine(job, observed, conds, now)
    return base.model_copy(update=machine.run(prev))


class _Machine:
    """One evaluation of the run policy for an unfinished job."""

    def __init__(self, job: RLHFJob, observed: Observed, conds: Conditions, now: datetime) -> None:
        self.job, self.observed, self.conds, self.now = job, observed, conds, now
        self.policy = job.spec.run_policy
        self.queued = job.spec.placement.queue_name is not None

    def run(self, prev: RLHFJobStatus) -> dict[str, object]:
        attempt = max(prev.restarts, self.observed.latest_attempt)
        current = self.observed.attempt(attempt)
        start, completion = prev.start_time, prev.completion_time
        if current is not None and current.succeeded:
            phase, completion = self._succeeded(current)
            message = "training finished"
        elif current is not None and current.failed:
            phase, attempt, completion, message = self._failed(current, attempt)
            current = self.observed.attempt(attempt)
        elif self._deadline_passed(start):
            phase, completion = Phase.FAILED, format_time(self.now)
            limit = self.policy.active_deadline_seconds
            message = f"runPolicy.activeDeadlineSeconds ({limit}s) passed"
            self._finish_failed(R.DEADLINE_EXCEEDED, message)
        else:
            phase, message = self._in_progress(current, prev, attempt)
        held = phase is Phase.SUSPENDED or self._held_by_queue(current)
        if held:
            start = None  # the deadline clock stops while suspended (as for batch/v1 Jobs)
        elif start is None and not phase.is_finished:
            start = format_time(self.now)
        return {
            "phase": phase,
            "conditions": self.conds.as_list(),
            "ray_job": _ray_job_ref(ray_job_name(self.job.name, attempt), current),
            "restarts": attempt,
            "start_time": start,
            "completion_time": completion,
            "message": message or None,
        }

    # --- outcomes -----------------------------------------------------------------------

    def _succeeded(self, current: RayJobObservation) -> tuple[Phase, str]:
        c = self.conds
        c.set(ConditionType.COMPLETE, T, R.JOB_SUCCEEDED, f"RayJob {current.name} succeeded")
        c.set(ConditionType.RUNNING, F, R.JOB_SUCCEEDED, "training finished")
        c.set(ConditionType.CLUSTER_READY, F, R.CLUSTER_SHUT_DOWN, "the Ray cluster was removed")
        return Phase.SUCCEEDED, current.end_time or format_time(self.now)

    def _failed(
        self, current: RayJobObservation, attempt: int
    ) -> tuple[Phase, int, str | None, str]:
        why = f"attempt {attempt} (RayJob {current.name}) failed: {current.failure}"
        limit = self.policy.backoff_limit
        if current.deployment_status is DeploymentStatus.VALIDATION_FAILED:
            message = f"{why}; KubeRay rejected the RayJob, a retry would fail the same way"
            self._finish_failed(R.JOB_FAILED, message)
            return Phase.FAILED, attempt, format_time(self.now), message
        if attempt < limit:
            message = f"{why}; restart {attempt + 1} of {limit} resumes from the latest checkpoint"
            self.conds.set(ConditionType.RESTARTED, T, R.RETRYING, message)
            self.conds.set(ConditionType.RUNNING, F, R.RETRYING, message)
            self.conds.set(ConditionType.CLUSTER_READY, F, R.CLUSTER_SHUT_DOWN, "attempt ended")
            self.conds.drop(ConditionType.ADMITTED)
            return Phase.PENDING, attempt + 1, None, message
        message = f"{why}; runPolicy.backoffLimit ({limit}) reached"
        self._finish_failed(R.BACKOFF_LIMIT_EXCEEDED, message)
        return Phase.FAILED, attempt, format_time(self.now), message

    def _finish_failed(self, reason: ConditionReason, message: str) -> None:
        self.conds.set(ConditionType.FAILED, T, reason, message)
        self.conds.set(ConditionType.RUNNING, F, reason, message)
        self.conds.set(ConditionType.CLUSTER_READY, F, R.CLUSTER_SHUT_DOWN, "no Ray cluster")

    def _deadline_passed(self, start: str | None) -> bool:
        deadline, started = self.policy.active_deadline_seconds, parse_time(start)
        if deadline is None or started is None or self.policy.suspend:
            return False
        return self.now >= started + timedelta(seconds=deadline)

    def _held_by_queue(self, current: RayJobObservation | None) -> bool:
        return self.queued and current is not None and current.suspend and not self.policy.suspend

    # --- in progress --------------------------------------------------------------------

    def _in_progress(
        self, current: RayJobObservation | None, prev: RLHFJobStatus, attempt: int
    ) -> tuple[Phase, str]:
        c, suspend = self.conds, self.policy.suspend
        was_suspended = (s := c.get(ConditionType.SUSPENDED)) is not None and s.status is T
        if suspend:
            c.set(ConditionType.SUSPENDED, T, R.SUSPENDED_BY_USER, "runPolicy.suspend is true")
            c.set(ConditionType.RUNNING, F, R.SUSPENDED_BY_USER, "suspended")
            c.set(ConditionType.CLUSTER_READY, F, R.SUSPENDED_BY_USER, "the Ray cluster is removed")
            return Phase.SUSPENDED, "suspended: the Ray cluster is removed, GPUs are free"
        if was_suspended:
            c.set(ConditionType.SUSPENDED, F, R.RESUMED, "resumes from the latest checkpoint")
        if current is None:
            return self._no_ray_job(prev, attempt)
        if self._held_by_queue(current):
            queue = self.job.spec.placement.queue_name
            c.set(ConditionType.ADMITTED, F, R.WAITING_FOR_ADMISSION, f"queued in {queue}")
            return Phase.PENDING, f"waiting for Kueue to admit the RayJob (queue {queue})"
        admitted = f"RayJob {current.name} created" + (" and admitted" if self.queued else "")
        c.set(ConditionType.ADMITTED, T, R.RAY_JOB_CREATED, admitted)
        status = current.deployment_status
        if status is DeploymentStatus.RUNNING:
            c.set(ConditionType.CLUSTER_READY, T, R.CLUSTER_READY, current.cluster_progress)
            c.set(ConditionType.RUNNING, T, R.TRAINING, f"attempt {attempt}")
            return Phase.RUNNING, "training"
        if status in {DeploymentStatus.SUSPENDING, DeploymentStatus.SUSPENDED}:
            # Resumed by the user; KubeRay has not started the new cluster yet.
            c.set(ConditionType.CLUSTER_READY, F, R.CLUSTER_PROVISIONING, "resuming")
            return Phase.PROVISIONING, "resuming: waiting for KubeRay to start a Ray cluster"
        state = (str(status) or "New") if status in _IN_PROGRESS else f"unknown state {status!r}"
        detail = f"{current.cluster_progress} (RayJob {state})"
        c.set(ConditionType.CLUSTER_READY, F, R.CLUSTER_PROVISIONING, detail)
        c.set(ConditionType.RUNNING, F, R.CLUSTER_PROVISIONING, "waiting for the Ray cluster")
        return Phase.PROVISIONING, "starting the Ray cluster"

    def _no_ray_job(self, prev: RLHFJobStatus, attempt: int) -> tuple[Phase, str]:
        c, name = self.conds, ray_job_name(self.job.name, attempt)
        if self.observed.missing_dependencies:
            missing = ", ".join(self.observed.missing_dependencies)
            c.set(ConditionType.ADMITTED, F, R.DEPENDENCY_MISSING, f"not found: {missing}")
            return Phase.PENDING, f"waiting for {missing}"
        if self.observed.conflicts:
            taken = ", ".join(self.observed.conflicts)
            c.set(
                ConditionType.ADMITTED, F, R.CHILD_CONFLICT, f"owned by another controller: {taken}"
            )
            return Phase.PENDING, f"cannot take over {taken}: another controller owns it"
        if (
            prev.ray_job is not None
            and prev.ray_job.name == name
            and prev.phase is not Phase.PENDING
        ):
            c.set(ConditionType.ADMITTED, F, R.RAY_JOB_MISSING, f"RayJob {name} disappeared")
            return Phase.PENDING, f"RayJob {name} disappeared: recreating it"
        c.drop(ConditionType.ADMITTED)
        return Phase.PENDING, f"creating RayJob {name}"


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
