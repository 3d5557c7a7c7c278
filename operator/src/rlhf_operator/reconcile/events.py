"""Kubernetes Events posted on an RLHFJob: closed enums of reasons, and the pure mapping from a
status transition to the events that announce it (`kubectl describe` shows them)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..api.v1alpha1 import (
    Condition,
    ConditionReason,
    ConditionStatus,
    ConditionType,
    RLHFJobStatus,
)


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(StrEnum):
    SPEC_INVALID = "SpecInvalid"
    POLICY_VIOLATION = "PolicyViolation"
    PLACEMENT_IMPOSSIBLE = "PlacementImpossible"
    SPEC_VALID = "SpecValid"
    CREATED = "Created"
    UPDATED = "Updated"
    DELETED = "Deleted"
    CHILD_CONFLICT = "ChildConflict"
    DEPENDENCY_MISSING = "DependencyMissing"
    WAITING_FOR_ADMISSION = "WaitingForAdmission"
    ADMITTED = "Admitted"
    CLUSTER_READY = "ClusterReady"
    RUNNING = "Running"
    CHECKPOINT_SAVED = "CheckpointSaved"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    RETRYING = "Retrying"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    RAY_JOB_MISSING = "RayJobMissing"
    TTL_EXPIRED = "TTLExpired"
    CHILD_APPLY_FAILED = "ChildApplyFailed"
    CHILDREN_APPLIED = "ChildrenApplied"
    UNSCHEDULABLE = "Unschedulable"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    CONTAINER_CONFIG_ERROR = "ContainerConfigError"
    CONTAINER_CRASH_LOOPING = "ContainerCrashLooping"
    STARTUP_TIMEOUT = "StartupTimeout"
    NOT_RETRYABLE = "NotRetryable"
    PREEMPTED = "Preempted"
    WAITING_FOR_JOB = "WaitingForJob"
    INPUT_JOB_FAILED = "InputJobFailed"
    INPUTS_RESOLVED = "InputsResolved"


@dataclass(frozen=True)
class Event:
    type: EventType
    reason: EventReason
    message: str


_T, _F = ConditionStatus.TRUE, ConditionStatus.FALSE
_R = ConditionReason

# (condition type, status, reason) -> the event announcing that the condition became so.
# Unlisted transitions (e.g. ClusterReady=False while provisioning) are not announced.
_ANNOUNCED: dict[
    tuple[ConditionType, ConditionStatus, ConditionReason | None], tuple[EventType, EventReason]
] = {
    (ConditionType.VALID, _F, _R.SPEC_INVALID): (EventType.WARNING, EventReason.SPEC_INVALID),
    (ConditionType.VALID, _F, _R.POLICY_VIOLATION): (
        EventType.WARNING,
        EventReason.POLICY_VIOLATION,
    ),
    (ConditionType.VALID, _F, _R.PLACEMENT_IMPOSSIBLE): (
        EventType.WARNING,
        EventReason.PLACEMENT_IMPOSSIBLE,
    ),
    (ConditionType.ADMITTED, _T, None): (EventType.NORMAL, EventReason.ADMITTED),
    (ConditionType.ADMITTED, _F, _R.WAITING_FOR_ADMISSION): (
        EventType.NORMAL,
        EventReason.WAITING_FOR_ADMISSION,
    ),
    (ConditionType.ADMITTED, _F, _R.DEPENDENCY_MISSING): (
        EventType.WARNING,
        EventReason.DEPENDENCY_MISSING,
    ),
    (ConditionType.ADMITTED, _F, _R.RAY_JOB_MISSING): (
        EventType.WARNING,
        EventReason.RAY_JOB_MISSING,
    ),
    (ConditionType.CLUSTER_READY, _T, None): (EventType.NORMAL, EventReason.CLUSTER_READY),
    (ConditionType.RUNNING, _T, None): (EventType.NORMAL, EventReason.RUNNING),
    (ConditionType.CHECKPOINTED, _T, None): (EventType.NORMAL, EventReason.CHECKPOINT_SAVED),
    (ConditionType.SUSPENDED, _T, None): (EventType.NORMAL, EventReason.SUSPENDED),
    (ConditionType.SUSPENDED, _F, _R.RESUMED): (EventType.NORMAL, EventReason.RESUMED),
    (ConditionType.COMPLETE, _T, None): (EventType.NORMAL, EventReason.SUCCEEDED),
    (ConditionType.FAILED, _T, _R.JOB_FAILED): (EventType.WARNING, EventReason.FAILED),
    (ConditionType.FAILED, _T, _R.BACKOFF_LIMIT_EXCEEDED): (
        EventType.WARNING,
        EventReason.BACKOFF_LIMIT_EXCEEDED,
    ),
    (ConditionType.FAILED, _T, _R.DEADLINE_EXCEEDED): (
        EventType.WARNING,
        EventReason.DEADLINE_EXCEEDED,
    ),
    (ConditionType.FAILED, _T, _R.STARTUP_TIMEOUT): (
        EventType.WARNING,
        EventReason.STARTUP_TIMEOUT,
    ),
    (ConditionType.FAILED, _T, _R.NOT_RETRYABLE): (EventType.WARNING, EventReason.NOT_RETRYABLE),
    (ConditionType.INPUTS_READY, _F, _R.WAITING_FOR_JOB): (
        EventType.NORMAL,
        EventReason.WAITING_FOR_JOB,
    ),
    (ConditionType.INPUTS_READY, _F, _R.INPUT_JOB_FAILED): (
        EventType.WARNING,
        EventReason.INPUT_JOB_FAILED,
    ),
    (ConditionType.INPUTS_READY, _T, None): (EventType.NORMAL, EventReason.INPUTS_RESOLVED),
    (ConditionType.RESTARTED, _T, _R.PREEMPTED): (EventType.NORMAL, EventReason.PREEMPTED),
    (ConditionType.RESTARTED, _T, None): (EventType.WARNING, EventReason.RETRYING),
    # A conflict shows on ChildrenApplied (and blocks admission, quietly: one event is enough).
    (ConditionType.CHILDREN_APPLIED, _F, _R.CHILD_CONFLICT): (
        EventType.WARNING,
        EventReason.CHILD_CONFLICT,
    ),
    (ConditionType.CHILDREN_APPLIED, _F, None): (
        EventType.WARNING,
        EventReason.CHILD_APPLY_FAILED,
    ),
    # Why the pods of a starting attempt do not run (the scheduler's or kubelet's words).
    (ConditionType.CLUSTER_READY, _F, _R.UNSCHEDULABLE): (
        EventType.WARNING,
        EventReason.UNSCHEDULABLE,
    ),
    (ConditionType.CLUSTER_READY, _F, _R.IMAGE_PULL_FAILED): (
        EventType.WARNING,
        EventReason.IMAGE_PULL_FAILED,
    ),
    (ConditionType.CLUSTER_READY, _F, _R.CONTAINER_CONFIG_ERROR): (
        EventType.WARNING,
        EventReason.CONTAINER_CONFIG_ERROR,
    ),
    (ConditionType.CLUSTER_READY, _F, _R.CONTAINER_CRASH_LOOPING): (
        EventType.WARNING,
        EventReason.CONTAINER_CRASH_LOOPING,
    ),
}

# Conditions whose message carries news on its own (a new checkpoint, another restart, a
# different child refused).
_MESSAGE_IS_NEWS = {
    ConditionType.CHECKPOINTED,
    ConditionType.RESTARTED,
    ConditionType.CHILDREN_APPLIED,
}
# Conditions whose True state is news only when it recovers from False.
_RECOVERIES = {
    ConditionType.VALID: (EventReason.SPEC_VALID, "spec is valid"),
    ConditionType.CHILDREN_APPLIED: (EventReason.CHILDREN_APPLIED, "every child applied"),
}


def _announcement(condition: Condition) -> tuple[EventType, EventReason] | None:
    key = (condition.type, condition.status, condition.reason)
    return _ANNOUNCED.get(key) or _ANNOUNCED.get((condition.type, condition.status, None))


def transition_events(previous: RLHFJobStatus | None, current: RLHFJobStatus) -> list[Event]:
    """Events for the conditions that changed from `previous` to `current`."""
    before = {c.type: c for c in (previous.conditions if previous else [])}
    events: list[Event] = []
    for condition in current.conditions:
        old = before.get(condition.type)
        changed = old is None or (old.status, old.reason) != (condition.status, condition.reason)
        news = condition.type in _MESSAGE_IS_NEWS and old is not None
        if not changed and not (news and old is not None and old.message != condition.message):
            continue
        recovery = _RECOVERIES.get(condition.type)
        if recovery is not None and condition.status is _T:
            if old is not None and old.status is _F:
                events.append(Event(EventType.NORMAL, *recovery))
            continue
        announced = _announcement(condition)
        if announced is not None:
            events.append(Event(announced[0], announced[1], condition.message))
    return events
