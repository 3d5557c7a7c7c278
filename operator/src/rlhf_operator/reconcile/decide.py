"""One reconcile pass as a pure decision: (parsed RLHFJob, observed, settings, now) -> Decision.

The job comes parsed (`parse.py`: validated, checked against the platform's policy, placed,
once per pass) -> its `fromJob` inputs -> status (the run policy) -> the children that must
exist, the RayJobs to delete, the events to post, when to look again.
`controllers/jobs.py` carries the decision out against the API server; nothing here does I/O, so
every case is a table row in the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rlhf_trainer.config import ConfigModel

from ..api.v1alpha1 import (
    ConditionReason,
    ConditionType,
    Phase,
    RLHFJob,
    RLHFJobStatus,
    TrainerReport,
)
from ..builders.children import render_children
from ..builders.common import JSON, report_name
from ..builders.secret import RAY_TOKEN_KEY
from ..settings import OperatorSettings
from .conditions import Conditions, F, T
from .desired import Desired
from .evaluate import STOPPING_FAILURES, evaluate, invalid_status, is_finished, parse_time
from .events import Event, transition_events
from .inputs import Resolution, resolve, with_inputs
from .observed import Observed
from .parse import Parsed, parse

# Paths inside a RayJob that another controller owns while the job waits in a Kueue queue.
SUSPEND_PATH = ("spec", "suspend")


@dataclass(frozen=True)
class Decision:
    status: RLHFJobStatus
    apply: tuple[Desired, ...] = ()
    delete_ray_jobs: tuple[str, ...] = ()
    delete_self: bool = False
    requeue_after: float | None = None
    events: tuple[Event, ...] = ()
    # The spec is invalid: nothing is retried until it changes (kopf PermanentError).
    invalid: str | None = None
    # Something the job needs is missing: look again later (kopf TemporaryError).
    waiting: str | None = None
    problems: list[str] = field(default_factory=list)


def _invalid(
    parsed: Parsed, trainer: TrainerReport | None, observed: Observed, now: datetime
) -> Decision:
    reason = parsed.refusal.reason if parsed.refusal else ConditionReason.SPEC_INVALID
    message = "; ".join(parsed.problems)
    status = invalid_status(
        parsed.previous,
        generation=parsed.generation,
        reason=reason,
        message=message,
        has_ray_job=bool(observed.ray_jobs),
        now=now,
    ).model_copy(update={"trainer": trainer})
    return Decision(
        status=status,
        events=tuple(transition_events(parsed.previous, status)),
        invalid=message,
        problems=parsed.problems,
    )


def _desired(job: RLHFJob, obj: JSON) -> Desired:
    if obj["kind"] == "Secret":
        return Desired(obj, create_only=True, generated=(RAY_TOKEN_KEY,))
    if obj["kind"] == "PersistentVolumeClaim" or obj["metadata"]["name"] == report_name(job.name):
        return Desired(obj, create_only=True)
    return Desired(obj)


def decide(
    job: Parsed | Mapping[str, Any],
    observed: Observed,
    settings: OperatorSettings,
    now: datetime,
) -> Decision:
    """The whole pass as a value. `job` is the body as `parse` read it once for this pass (a
    raw body is parsed here: the tests' tables hand bodies)."""
    parsed = job if isinstance(job, Parsed) else parse(job, settings)
    prev = parsed.previous
    # The report object is the truth; the mirror stands in while it is not seen (or empty).
    trainer = observed.report if observed.report is not None else parsed.mirrored
    if parsed.job is None or parsed.allocation is None:
        return _invalid(parsed, trainer, observed, now)
    resolution = resolve(parsed.job.spec, prev.inputs if prev else None, observed.producers)
    if not resolution.ready:
        return _blocked_on_inputs(parsed, trainer, resolution, settings, now)
    valid = with_inputs(parsed.job, resolution.inputs)
    evaluation = evaluate(valid, parsed.allocation, observed, trainer, now)
    status = _inputs_ready(evaluation.status, resolution, parsed.generation, now)
    events = tuple(transition_events(prev, status))
    if is_finished(status):
        return _finished(valid, status, observed, events, now)

    attempt = status.restarts
    children = (
        parsed.children
        if parsed.children is not None and valid is parsed.job and attempt == 0
        else render_children(valid, settings, attempt=attempt, allocation=parsed.allocation)
    )
    apply = [_desired(valid, obj) for obj in children.support]
    waiting = None
    # The RayJob's pods would mount what could not be applied: it waits for the rest.
    support_failed = any(f.kind != "RayJob" for f in observed.apply_failures)
    if observed.missing_dependencies:
        waiting = "waiting for " + ", ".join(observed.missing_dependencies)
    elif not observed.conflicts and not support_failed:
        queued_by_kueue = valid.spec.placement.queue_name is not None
        preserve = (SUSPEND_PATH,) if queued_by_kueue and not valid.spec.run_policy.suspend else ()
        apply.append(Desired(children.ray_job, preserve=preserve))
    stale = tuple(o.name for o in observed.ray_jobs if o.attempt < attempt and not o.deleting)
    waits = [_deadline_wait(valid, status, now)]
    if evaluation.wake_at is not None:
        waits.append(max(0.0, (evaluation.wake_at - now).total_seconds()))
    return Decision(
        status=status,
        apply=tuple(apply),
        delete_ray_jobs=stale,
        requeue_after=min((w for w in waits if w is not None), default=None),
        events=events,
        waiting=waiting,
    )


def _inputs_ready(
    status: RLHFJobStatus, resolution: Resolution, generation: int | None, now: datetime
) -> RLHFJobStatus:
    """InputsReady=True and `status.inputs`, on jobs that take a model from another job."""
    if not resolution.inputs:
        return status
    conds = Conditions(status.conditions, now, generation)
    conds.set(ConditionType.INPUTS_READY, T, ConditionReason.INPUTS_RESOLVED, resolution.summary)
    return status.model_copy(
        update={"conditions": conds.as_list(), "inputs": list(resolution.inputs)}
    )


def _blocked_on_inputs(
    parsed: Parsed,
    trainer: TrainerReport | None,
    resolution: Resolution,
    settings: OperatorSettings,
    now: datetime,
) -> Decision:
    """A job whose `fromJob` model is not there: nothing of it is created. It waits (Pending)
    for a job that has not succeeded, and fails for one that failed; either way it is looked
    at again when that job changes (the operator watches it), so it recovers when the
    producing job is re-created and succeeds."""
    prev = parsed.previous
    base = prev or RLHFJobStatus()
    generation = parsed.generation
    conds = Conditions(base.conditions, now, generation)
    conds.set(ConditionType.VALID, T, ConditionReason.SPEC_VALID, "")
    message = resolution.summary
    if resolution.failed:
        reason, phase = ConditionReason.INPUT_JOB_FAILED, Phase.FAILED
        conds.set(ConditionType.FAILED, T, reason, message)
    else:
        reason, phase = ConditionReason.WAITING_FOR_JOB, Phase.PENDING
        failed = conds.get(ConditionType.FAILED)
        if failed is not None and failed.status is T:
            conds.set(ConditionType.FAILED, F, reason, "waiting for the input job again")
    conds.set(ConditionType.INPUTS_READY, F, reason, message)
    status = base.model_copy(
        update={
            "phase": phase,
            "conditions": conds.as_list(),
            "observed_generation": generation,
            "message": message,
            "trainer": trainer,
            "inputs": list(resolution.inputs) or None,
        }
    )
    return Decision(
        status=status,
        events=tuple(transition_events(prev, status)),
        # The producing job's events bring it back sooner; this is the safety net.
        requeue_after=settings.dependency_retry_seconds,
    )


def _finished(
    job: RLHFJob,
    status: RLHFJobStatus,
    observed: Observed,
    events: tuple[Event, ...],
    now: datetime,
) -> Decision:
    failed = next((c for c in status.conditions if c.type is ConditionType.FAILED), None)
    # A deadline or a startup timeout stops an attempt: its RayJob goes (and with it the Ray
    # cluster and whatever GPUs its pods hold). Otherwise KubeRay already shut the cluster
    # down and the RayJob stays as a record.
    stop = failed is not None and failed.reason in STOPPING_FAILURES
    delete = tuple(o.name for o in observed.ray_jobs if not o.deleting) if stop else ()
    ttl = job.spec.run_policy.ttl_seconds_after_finished
    finished_at = parse_time(status.completion_time)
    if ttl is None or finished_at is None:
        return Decision(status=status, delete_ray_jobs=delete, events=events)
    remaining = (finished_at + timedelta(seconds=ttl) - now).total_seconds()
    if remaining <= 0:
        return Decision(status=status, delete_ray_jobs=delete, delete_self=True, events=events)
    return Decision(status=status, delete_ray_jobs=delete, requeue_after=remaining, events=events)


def _deadline_wait(job: RLHFJob, status: RLHFJobStatus, now: datetime) -> float | None:
    deadline, started = job.spec.run_policy.active_deadline_seconds, parse_time(status.start_time)
    if deadline is None or started is None:
        return None
    return max(0.0, (started + timedelta(seconds=deadline) - now).total_seconds())


def status_patch(previous: Mapping[str, Any] | None, status: ConfigModel) -> dict[str, Any]:
    """A JSON merge patch turning the stored status into ours, `trainer` included (the
    operator mirrors the trainer's validated report there; nobody else writes the status).
    Empty when nothing changed: then no request is made."""
    return _merge_diff(previous or {}, status.to_manifest())


def _merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = _merge_diff(before, value)
            if nested:
                patch[key] = nested
        elif before != value or key not in old:
            patch[key] = value
    return patch
