"""The run policy of one unfinished RLHFJob as a small state machine over its current
attempt's RayJob (pure; see `evaluate.py` for the table of outcomes)."""

from __future__ import annotations

from datetime import datetime, timedelta

from rlhf_trainer.config import ExitCode, FailureClass
from rlhf_trainer.config.guardrails import GuardrailAction, tripped_guard

from ..api.v1alpha1 import (
    ConditionReason,
    ConditionType,
    Phase,
    RayJobRef,
    RLHFJob,
    RLHFJobStatus,
    TrainerReport,
)
from ..builders.common import ray_job_name
from .conditions import GUARD_REASONS, Conditions, F, R, T, format_time, parse_time
from .diagnosis import (
    Verdict,
    bounded,
    classify,
    describe_disruption,
    disruption_verdict,
    kuberay_diagnosis,
    pod_diagnosis,
    unclassified,
)
from .observed import DeploymentStatus, Observed, RayJobObservation
from .usage import account, last_checkpoint_time

# How long a failed attempt waits for the trainer's outcome when KubeRay names no exit code:
# the trainer writes it before exiting, but its watch event may trail KubeRay's.
OUTCOME_GRACE = timedelta(seconds=10)
_IN_PROGRESS = {
    DeploymentStatus.NEW,
    DeploymentStatus.INITIALIZING,
    DeploymentStatus.WAITING,
    DeploymentStatus.RETRYING,
}


def ray_job_ref(name: str, current: RayJobObservation | None) -> RayJobRef:
    if current is None:
        return RayJobRef(name=name)
    return RayJobRef(
        name=current.name,
        ray_cluster_name=current.cluster_name,
        job_id=current.job_id,
        job_deployment_status=str(current.deployment_status) or None,
        job_status=str(current.job_status) or None,
        dashboard_url=current.dashboard_url,
        message=bounded(current.message) if current.message else None,
    )


class Machine:
    """One evaluation of the run policy for an unfinished job."""

    def __init__(
        self,
        job: RLHFJob,
        observed: Observed,
        report: TrainerReport | None,
        conds: Conditions,
        now: datetime,
    ) -> None:
        self.job, self.observed, self.report = job, observed, report
        self.conds, self.now = conds, now
        self.policy = job.spec.run_policy
        self.queued = job.spec.placement.queue_name is not None
        self.wake_at: datetime | None = None
        self.completion: str | None = None
        self.preemptions = 0
        self.guardrail_trips = 0
        # The attempt that failed in this pass (its GPU time since the checkpoint is lost).
        self.failed_now = False

    def run(self, prev: RLHFJobStatus, gpus: int) -> dict[str, object]:
        attempt = max(prev.restarts, self.observed.latest_attempt)
        current = self.observed.attempt(attempt)
        start, self.completion = prev.start_time, prev.completion_time
        self.preemptions = prev.preemptions
        self.guardrail_trips = prev.guardrail_trips
        ended = current if current is not None and (current.failed or current.succeeded) else None
        self._note_disruption(current, attempt)
        if current is not None and current.succeeded:
            phase, message = self._succeeded(current)
        elif current is not None and (current.failed or self._ended_while_disrupted(current)):
            phase, attempt, message = self._failed(current, attempt, prev)
            current = self.observed.attempt(attempt)
        elif self._deadline_passed(start):
            limit = self.policy.active_deadline_seconds
            message = f"runPolicy.activeDeadlineSeconds ({limit}s) passed"
            phase = self._finish_failed(R.DEADLINE_EXCEEDED, message)
        else:
            phase, message = self._in_progress(current, prev, attempt)
        held = phase is Phase.SUSPENDED or self._held_by_queue(current)
        if held:
            start = None  # the deadline clock stops while suspended (as for batch/v1 Jobs)
        elif start is None and not phase.is_finished:
            start = format_time(self.now)
        usage = account(
            prev.usage,
            running=phase is Phase.RUNNING,
            gpus=gpus,
            now=self.now,
            attempts=self.observed.latest_attempt + 1 if self.observed.ray_jobs else 0,
            ended_at=parse_time(ended.end_time) if ended is not None else None,
            failed=self.failed_now,
            checkpoint_at=last_checkpoint_time(self.report),
        )
        return {
            "phase": phase,
            "conditions": self.conds.as_list(),
            "ray_job": ray_job_ref(ray_job_name(self.job.name, attempt), current),
            "restarts": attempt,
            "preemptions": self.preemptions,
            "guardrail_trips": self.guardrail_trips,
            "start_time": start,
            "completion_time": self.completion,
            "message": message or None,
            "usage": usage,
        }

    def _wake(self, moment: datetime) -> None:
        self.wake_at = moment if self.wake_at is None else min(self.wake_at, moment)

    # --- outcomes -----------------------------------------------------------------------

    def _succeeded(self, current: RayJobObservation) -> tuple[Phase, str]:
        c = self.conds
        c.set(ConditionType.COMPLETE, T, R.JOB_SUCCEEDED, f"RayJob {current.name} succeeded")
        c.set(ConditionType.RUNNING, F, R.JOB_SUCCEEDED, "training finished")
        c.set(ConditionType.CLUSTER_READY, F, R.CLUSTER_SHUT_DOWN, "the Ray cluster was removed")
        self.completion = current.end_time or format_time(self.now)
        return Phase.SUCCEEDED, "training finished"

    def _failed(
        self, current: RayJobObservation, attempt: int, prev: RLHFJobStatus
    ) -> tuple[Phase, int, str]:
        if current.deployment_status is DeploymentStatus.VALIDATION_FAILED:
            why = f"attempt {attempt} (RayJob {current.name}) failed: {bounded(current.failure)}"
            message = f"{why}; KubeRay rejected the RayJob, a retry would fail the same way"
            return self._finish_failed(R.JOB_FAILED, message), attempt, message
        verdict = classify(current, self.report)
        if verdict is None:
            ended = parse_time(current.end_time)
            if ended is not None and self.now < ended + OUTCOME_GRACE:
                self._wake(ended + OUTCOME_GRACE)
                phase = prev.phase if not prev.phase.is_finished else Phase.RUNNING
                return (
                    phase,
                    attempt,
                    f"RayJob {current.name} failed: waiting for the trainer's report",
                )
            verdict = unclassified(current)
        # Lost with its pods (an eviction, a drain): a preemption, whatever broke in the ranks.
        verdict = disruption_verdict(verdict, self._disruption()) or verdict
        self.failed_now = True
        return self._after_failure(current, attempt, verdict)

    def _note_disruption(self, current: RayJobObservation | None, attempt: int) -> None:
        """Disrupted=True while the pod watch shows the attempt's pods being disrupted (their
        DisruptionTarget condition), kept once they are gone: the attempt's failure, which
        KubeRay reports later, is then a preemption."""
        said = describe_disruption(self.observed.disrupted)
        if said is None or current is None or current.succeeded:
            return
        message = bounded(f"attempt {attempt} (RayJob {current.name}): {said}")
        self.conds.set(ConditionType.DISRUPTED, T, R.PREEMPTED, message)

    def _ended_while_disrupted(self, current: RayJobObservation) -> bool:
        """The driver of a disrupted attempt said how it ended (its checkpoint, Preempted): the
        attempt is over, whatever KubeRay makes of the cluster it lost (it recreates the pods,
        and its submitter may submit the job again to the new head)."""
        outcome = self.report.outcome if self.report is not None else None
        return (
            self._disruption() is not None
            and outcome is not None
            and outcome.attempt == current.attempt
            and outcome.failure_class is not None
            and outcome.exit_code != ExitCode.SUCCEEDED
        )

    def _disruption(self) -> str | None:
        disrupted = self.conds.get(ConditionType.DISRUPTED)
        return disrupted.message if disrupted is not None and disrupted.status is T else None

    def _after_failure(
        self, current: RayJobObservation, attempt: int, verdict: Verdict
    ) -> tuple[Phase, int, str]:
        kind = verdict.failure_class
        verb = "was preempted" if kind is FailureClass.PREEMPTED else "failed"
        why = f"attempt {attempt} (RayJob {current.name}) {verb}: {verdict.describe()}"
        if kind is FailureClass.INVALID_SPEC:
            message = f"{why}; not retried: a retry cannot fix this"
            return self._finish_failed(R.NOT_RETRYABLE, message), attempt, message
        if kind is FailureClass.UNHEALTHY:
            return self._unhealthy(attempt, verdict)
        if kind is FailureClass.PREEMPTED:
            self.preemptions += 1
            message = (
                f"{why}; restart {attempt + 1} resumes from the latest checkpoint "
                "(preemptions do not count against runPolicy.backoffLimit)"
            )
            return self._restart(R.PREEMPTED, message), attempt + 1, message
        used, limit = attempt - self.preemptions - self.guardrail_trips, self.policy.backoff_limit
        if used < limit:
            message = f"{why}; restart {used + 1} of {limit} resumes from the latest checkpoint"
            return self._restart(R.RETRYING, message), attempt + 1, message
        message = f"{why}; runPolicy.backoffLimit ({limit}) reached"
        return self._finish_failed(R.BACKOFF_LIMIT_EXCEEDED, message), attempt, message

    def _unhealthy(self, attempt: int, verdict: Verdict) -> tuple[Phase, int, str]:
        """A guardrail tripped (the trainer checkpointed the step and stopped). Healthy=False
        names the guard, once, at the spec's generation of the trip; with `action: fail` the
        job fails, else it stays suspended until the spec changes (the bound raised, or any
        edit), and then the next attempt resumes from the checkpoint, not charged to
        runPolicy.backoffLimit."""
        c, generation = self.conds, self.job.metadata.get("generation")
        healthy = c.get(ConditionType.HEALTHY)
        tripped = healthy is not None and healthy.status is F
        if not tripped:
            guard = tripped_guard(verdict.detail)
            reason = GUARD_REASONS.get(guard, R.GUARDRAIL_TRIPPED) if guard else R.GUARDRAIL_TRIPPED
            c.set(ConditionType.HEALTHY, F, reason, verdict.detail)
            self.guardrail_trips += 1
        elif healthy is not None and healthy.observed_generation != generation:
            message = (
                f"the spec changed (generation {generation}) after the guardrail stopped "
                f"attempt {attempt}; attempt {attempt + 1} resumes from the latest checkpoint"
            )
            c.set(ConditionType.HEALTHY, T, R.GUARDRAIL_RESUMED, message)
            c.set(ConditionType.SUSPENDED, F, R.RESUMED, message)
            return self._restart(R.GUARDRAIL_RESUMED, message), attempt + 1, message
        message = bounded(f"attempt {attempt} stopped by a guardrail: {verdict.detail}")
        if self.policy.guardrails.action == GuardrailAction.FAIL:
            return self._finish_failed(R.GUARDRAIL_TRIPPED, message), attempt, message
        c.set(ConditionType.SUSPENDED, T, R.GUARDRAIL_TRIPPED, message)
        c.set(ConditionType.RUNNING, F, R.GUARDRAIL_TRIPPED, "stopped by a guardrail")
        c.set(ConditionType.CLUSTER_READY, F, R.CLUSTER_SHUT_DOWN, "attempt ended")
        edit = "change the spec (raise or turn off the guard) to resume from the checkpoint"
        return Phase.SUSPENDED, attempt, f"{message}; {edit}"

    def _restart(self, reason: ConditionReason, message: str) -> Phase:
        self.conds.set(ConditionType.RESTARTED, T, reason, message)
        self.conds.set(ConditionType.RUNNING, F, reason, message)
        self.conds.set(ConditionType.CLUSTER_READY, F, R.CLUSTER_SHUT_DOWN, "attempt ended")
        self.conds.drop(ConditionType.ADMITTED)
        self.conds.drop(ConditionType.DISRUPTED)  # it spoke of the attempt that ended
        return Phase.PENDING

    def _finish_failed(self, reason: ConditionReason, message: str) -> Phase:
        self.conds.set(ConditionType.FAILED, T, reason, message)
        self.conds.set(ConditionType.RUNNING, F, reason, message)
        self.conds.set(ConditionType.CLUSTER_READY, F, R.CLUSTER_SHUT_DOWN, "no Ray cluster")
        self.completion = format_time(self.now)
        self.failed_now = True
        return Phase.FAILED

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
            return self._provisioning(current, "resuming", "waiting for KubeRay to resume")
        state = (str(status) or "New") if status in _IN_PROGRESS else f"unknown state {status!r}"
        detail = f"{current.cluster_progress} (RayJob {state})"
        c.set(ConditionType.RUNNING, F, R.CLUSTER_PROVISIONING, "waiting for the Ray cluster")
        return self._provisioning(current, detail, "starting the Ray cluster")

    def _provisioning(
        self, current: RayJobObservation, detail: str, doing: str
    ) -> tuple[Phase, str]:
        """ClusterReady=False with what the pods and KubeRay report; Failed once the pods
        have not all run for runPolicy.startupTimeoutSeconds."""
        pods = pod_diagnosis(self.observed.pods)
        kuberay = kuberay_diagnosis(current)
        timeout = self.policy.startup_timeout_seconds
        since = self._provisioning_since()
        if since is not None and self.now >= since + timedelta(seconds=timeout):
            why = pods[1] if pods is not None else (f"KubeRay: {kuberay}" if kuberay else detail)
            message = bounded(
                f"the pods of RayJob {current.name} did not all run within "
                f"runPolicy.startupTimeoutSeconds ({timeout}s): {why}"
            )
            return self._finish_failed(R.STARTUP_TIMEOUT, message), message
        if since is not None:
            self._wake(since + timedelta(seconds=timeout))
        if pods is not None:
            reason, text = pods
            self.conds.set(ConditionType.CLUSTER_READY, F, reason, text)
            return Phase.PROVISIONING, bounded(f"{doing}: {text}")
        if kuberay:
            detail = f"{detail}: {kuberay}"
        self.conds.set(ConditionType.CLUSTER_READY, F, R.CLUSTER_PROVISIONING, detail)
        return Phase.PROVISIONING, doing

    def _provisioning_since(self) -> datetime | None:
        """When this attempt last started to provision: the RayJob created or admitted by
        Kueue (Admitted), resumed by the user (Suspended), or back from running (Running),
        whichever is latest; read from the conditions' transition times, as set this pass."""
        kinds = (ConditionType.ADMITTED, ConditionType.SUSPENDED, ConditionType.RUNNING)
        times = [
            moment
            for kind in kinds
            if (cond := self.conds.get(kind)) is not None
            and (moment := parse_time(cond.last_transition_time)) is not None
        ]
        return max(times, default=None)

    def _no_ray_job(self, prev: RLHFJobStatus, attempt: int) -> tuple[Phase, str]:
        c, name = self.conds, ray_job_name(self.job.name, attempt)
        if self.observed.missing_dependencies:
            missing = ", ".join(self.observed.missing_dependencies)
            c.set(ConditionType.ADMITTED, F, R.DEPENDENCY_MISSING, f"not found: {missing}")
            return Phase.PENDING, f"waiting for {missing}"
        if self.observed.conflicts:
            taken = "; ".join(self.observed.conflicts)
            c.set(ConditionType.ADMITTED, F, R.CHILD_CONFLICT, bounded(f"not this job's: {taken}"))
            return Phase.PENDING, bounded(f"waiting: objects with this job's names exist: {taken}")
        if self.observed.apply_failures:
            first = self.observed.apply_failures[0]
            return Phase.PENDING, bounded(f"{first.summary}; retrying with backoff")
        if (
            prev.ray_job is not None
            and prev.ray_job.name == name
            and prev.phase is not Phase.PENDING
        ):
            c.set(ConditionType.ADMITTED, F, R.RAY_JOB_MISSING, f"RayJob {name} disappeared")
            return Phase.PENDING, f"RayJob {name} disappeared: recreating it"
        c.drop(ConditionType.ADMITTED)
        return Phase.PENDING, f"creating RayJob {name}"
