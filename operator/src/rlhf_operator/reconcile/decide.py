"""One reconcile pass as a pure decision: (RLHFJob body, observed, settings, now) -> Decision.

validate (the spec, then the platform's policy) -> plan -> status (the run policy) -> the
children that must exist, the RayJobs to delete, the events to post, when to look again.
`controllers/jobs.py` carries the decision out against the API server; nothing here does I/O, so
every case is a table row in the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from rlhf_trainer.config import ConfigModel, JobSpec, cluster_problems, validation_messages
from rlhf_trainer.config.documents import document_problems, quote
from rlhf_trainer.config.loading import NAME_MAX_LENGTH, NAME_PATTERN

from ..api.v1alpha1 import (
    ConditionReason,
    ConditionType,
    Phase,
    RLHFJob,
    RLHFJobStatus,
    TrainerReport,
)
from ..builders.allocation import PlacementError, plan
from ..builders.children import render_children
from ..builders.common import JSON, BuildError, report_name, trainer_image
from ..builders.secret import RAY_TOKEN_KEY
from ..settings import OperatorSettings
from .conditions import Conditions, F, T
from .desired import Desired
from .evaluate import STOPPING_FAILURES, evaluate, invalid_status, is_finished, parse_time
from .events import Event, transition_events
from .inputs import Resolution, resolve, with_inputs
from .observed import Observed
from .platform_policy import policy_problems

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


def spec_problems(body: Mapping[str, Any]) -> list[str]:
    """Field-level problems of the body's name and spec, beyond what the CRD enforces."""
    problems: list[str] = []
    name = str((body.get("metadata") or {}).get("name", ""))
    if len(name) > NAME_MAX_LENGTH or not NAME_PATTERN.match(name):
        problems.append(
            f"metadata.name: must be a DNS-1035 label of at most {NAME_MAX_LENGTH} characters "
            f"(children are named after it); got {quote(name)}"
        )
    unstorable = document_problems(body.get("spec") or {}, "spec")
    if unstorable:
        return problems + unstorable
    try:
        spec = JobSpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        problems += validation_messages(err, prefix="spec")
        return problems
    # What `rlhf run` can run but no pod can (`rlhf validate --cluster` says the same).
    problems += [p.render("spec") for p in cluster_problems(spec)]
    return problems


def previous_status(body: Mapping[str, Any]) -> tuple[RLHFJobStatus | None, TrainerReport | None]:
    """The stored status and the trainer's report as last mirrored into it; a part that does
    not parse is ignored (recomputed) rather than blocking the job."""
    raw = body.get("status") or {}
    trainer: TrainerReport | None = None
    if isinstance(raw.get("trainer"), Mapping):
        try:
            trainer = TrainerReport.model_validate(raw["trainer"])
        except ValidationError:
            trainer = None
    ours = {k: v for k, v in raw.items() if k != "trainer"}
    if not ours:
        return None, trainer
    try:
        return RLHFJobStatus.model_validate(ours), trainer
    except ValidationError:
        return None, trainer


def _generation(body: Mapping[str, Any]) -> int | None:
    value = (body.get("metadata") or {}).get("generation")
    return int(value) if value is not None else None


def _invalid(
    body: Mapping[str, Any],
    prev: RLHFJobStatus | None,
    trainer: TrainerReport | None,
    observed: Observed,
    reason: ConditionReason,
    problems: list[str],
    now: datetime,
) -> Decision:
    message = "; ".join(problems)
    status = invalid_status(
        prev,
        generation=_generation(body),
        reason=reason,
        message=message,
        has_ray_job=bool(observed.ray_jobs),
        now=now,
    ).model_copy(update={"trainer": trainer})
    return Decision(
        status=status,
        events=tuple(transition_events(prev, status)),
        invalid=message,
        problems=problems,
    )


def _desired(job: RLHFJob, obj: JSON) -> Desired:
    if obj["kind"] == "Secret":
        return Desired(obj, create_only=True, generated=(RAY_TOKEN_KEY,))
    if obj["kind"] == "PersistentVolumeClaim" or obj["metadata"]["name"] == report_name(job.name):
        return Desired(obj, create_only=True)
    return Desired(obj)


def decide(
    body: Mapping[str, Any], observed: Observed, settings: OperatorSettings, now: datetime
) -> Decision:
    prev, mirrored = previous_status(body)
    # The report object is the truth; the mirror stands in while it is not seen (or empty).
    trainer = observed.report if observed.report is not None else mirrored
    problems = spec_problems(body)
    if problems:
        return _invalid(body, prev, trainer, observed, ConditionReason.SPEC_INVALID, problems, now)
    job = RLHFJob.model_validate({**body, "status": prev.to_manifest() if prev else None})
    problems = policy_problems(job.spec, settings)
    if problems:
        reason = ConditionReason.POLICY_VIOLATION
        return _invalid(body, prev, trainer, observed, reason, problems, now)
    try:
        plan(job.spec)  # the builders' only other failure is the image, checked next
        trainer_image(job, settings)
    except PlacementError as err:
        reason = ConditionReason.PLACEMENT_IMPOSSIBLE
        return _invalid(body, prev, trainer, observed, reason, [str(err)], now)
    except BuildError as err:
        reason = ConditionReason.SPEC_INVALID
        return _invalid(body, prev, trainer, observed, reason, [str(err)], now)

    resolution = resolve(job.spec, prev.inputs if prev else None, observed.producers)
    if not resolution.ready:
        return _blocked_on_inputs(body, prev, trainer, resolution, settings, now)
    job = with_inputs(job, resolution.inputs)
    evaluation = evaluate(job, observed, trainer, now)
    status = _inputs_ready(evaluation.status, resolution, _generation(body), now)
    events = tuple(transition_events(prev, status))
    if is_finished(status):
        return _finished(job, status, observed, events, now)

    attempt = status.restarts
    children = render_children(job, settings, attempt=attempt)
    apply = [_desired(job, obj) for obj in children.support]
    waiting = None
    # The RayJob's pods would mount what could not be applied: it waits for the rest.
    support_failed = any(f.kind != "RayJob" for f in observed.apply_failures)
    if observed.missing_dependencies:
        waiting = "waiting for " + ", ".join(observed.missing_dependencies)
    elif not observed.conflicts and not support_failed:
        queued_by_kueue = job.spec.placement.queue_name is not None
        preserve = (SUSPEND_PATH,) if queued_by_kueue and not job.spec.run_policy.suspend else ()
        apply.append(Desired(children.ray_job, preserve=preserve))
    stale = tuple(o.name for o in observed.ray_jobs if o.attempt < attempt and not o.deleting)
    waits = [_deadline_wait(job, status, now)]
    if evaluation.wake_at is not None:
        waits.append(max(0.0, (evaluation.wake_at - now).total_seconds()))
    if status.phase is Phase.PROVISIONING:
        # Look at the starting pods again: their troubles go on status as they change.
        waits.append(settings.dependency_retry_seconds)
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
    body: Mapping[str, Any],
    prev: RLHFJobStatus | None,
    trainer: TrainerReport | None,
    resolution: Resolution,
    settings: OperatorSettings,
    now: datetime,
) -> Decision:
    """A job whose `fromJob` model is not there: nothing of it is created. It waits (Pending)
    for a job that has not succeeded, and fails for one that failed; either way it is looked
    at again when that job changes (the operator watches it), so it recovers when the
    producing job is re-created and succeeds."""
    base = prev or RLHFJobStatus()
    generation = _generation(body)
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
