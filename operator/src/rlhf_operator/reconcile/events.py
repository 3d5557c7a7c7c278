"""Kubernetes Events posted on an RLHFJob: the pure mapping from a status transition to the
events that announce it (`kubectl describe` shows them). An Event carries the reason of the
condition it announces (one vocabulary, `api/v1alpha1/reasons.py`), or a milestone's name."""

from __future__ import annotations

from dataclasses import dataclass

from ..api.v1alpha1 import (
    Condition,
    ConditionReason,
    ConditionStatus,
    ConditionType,
    EventReason,
    EventType,
    RLHFJobStatus,
)
from .conditions import GUARD_REASONS, REFUSALS, TERMINAL_FAILURES
from .diagnosis import POD_TROUBLE_REASONS


@dataclass(frozen=True)
class Event:
    type: EventType
    reason: ConditionReason | EventReason
    message: str


_T, _F = ConditionStatus.TRUE, ConditionStatus.FALSE
_N, _W = EventType.NORMAL, EventType.WARNING
_C, _R = ConditionType, ConditionReason

# Which condition changes are announced, and how: (type, status) -> {reason: event type}, the
# key None standing for any reason. Unlisted changes (ClusterReady=False while provisioning,
# Running=False, ...) are not announced; a conflict blocks admission quietly (ChildrenApplied
# says it once).
_ANNOUNCED: dict[tuple[ConditionType, ConditionStatus], dict[ConditionReason | None, EventType]] = {
    (_C.VALID, _F): dict.fromkeys(REFUSALS, _W),
    (_C.ADMITTED, _T): {None: _N},
    (_C.ADMITTED, _F): {
        _R.WAITING_FOR_ADMISSION: _N,
        _R.DEPENDENCY_MISSING: _W,
        _R.RAY_JOB_MISSING: _W,
    },
    (_C.CLUSTER_READY, _T): {None: _N},
    # Why the pods of a starting attempt do not run (the scheduler's or kubelet's words).
    (_C.CLUSTER_READY, _F): dict.fromkeys(POD_TROUBLE_REASONS, _W),
    (_C.RUNNING, _T): {None: _N},
    (_C.CHECKPOINTED, _T): {None: _N},
    (_C.SUSPENDED, _T): {None: _N},
    (_C.SUSPENDED, _F): {_R.RESUMED: _N},
    (_C.COMPLETE, _T): {None: _N},
    (_C.FAILED, _T): dict.fromkeys(TERMINAL_FAILURES, _W),
    (_C.INPUTS_READY, _T): {None: _N},
    (_C.INPUTS_READY, _F): {_R.WAITING_FOR_JOB: _N, _R.INPUT_JOB_FAILED: _W},
    (_C.RESTARTED, _T): {_R.PREEMPTED: _N, None: _W},
    # The attempt's pods are being evicted or preempted: it checkpoints and is retried.
    (_C.DISRUPTED, _T): {None: _W},
    # A guardrail trip; the Event quotes the metric, its values and the bound (the message).
    (_C.HEALTHY, _F): dict.fromkeys(GUARD_REASONS.values(), _W),
    (_C.HEALTHY, _T): {_R.GUARDRAIL_RESUMED: _N},
    (_C.CHILDREN_APPLIED, _F): {None: _W},
}
# Milestones: these changes are announced by name rather than by the condition's reason.
_MILESTONES: dict[tuple[ConditionType, ConditionReason | None], EventReason] = {
    (_C.ADMITTED, None): EventReason.ADMITTED,
    (_C.RUNNING, None): EventReason.RUNNING,
    (_C.SUSPENDED, None): EventReason.SUSPENDED,
    (_C.COMPLETE, None): EventReason.SUCCEEDED,
    (_C.FAILED, _R.JOB_FAILED): EventReason.FAILED,
}
# Conditions whose message carries news on its own (a new checkpoint, another restart, a
# different child refused).
_MESSAGE_IS_NEWS = {
    ConditionType.CHECKPOINTED,
    ConditionType.RESTARTED,
    ConditionType.CHILDREN_APPLIED,
}
# Conditions whose True state is news only when it recovers from False (said in these words).
_RECOVERIES = {
    ConditionType.VALID: (_R.SPEC_VALID, "spec is valid"),
    ConditionType.CHILDREN_APPLIED: (_R.CHILDREN_APPLIED, "every child applied"),
}


# Changes another event of the same transition already says, or an action event does:
# - Admitted=True on its first appearance is the RayJob's creation, which the `Created` event
#   names (it is news when it follows Admitted=False: admitted by Kueue, a dependency found);
# - ClusterReady=True beside Running=True: the `Running` event says the cluster is up.
def _said_otherwise(
    condition: Condition, old: Condition | None, current: dict[ConditionType, Condition]
) -> bool:
    if condition.status is not _T:
        return False
    if condition.type is _C.ADMITTED:
        return old is None
    if condition.type is _C.CLUSTER_READY:
        running = current.get(_C.RUNNING)
        return running is not None and running.status is _T
    return False


def _announcement(condition: Condition) -> Event | None:
    kinds = _ANNOUNCED.get((condition.type, condition.status)) or {}
    kind = kinds.get(condition.reason) or kinds.get(None)
    if kind is None:
        return None
    reason: ConditionReason | EventReason = condition.reason
    if condition.status is _T or condition.type is _C.FAILED:
        reason = (
            _MILESTONES.get((condition.type, condition.reason))
            or _MILESTONES.get((condition.type, None))
            or reason
        )
    return Event(kind, reason, condition.message)


def transition_events(previous: RLHFJobStatus | None, current: RLHFJobStatus) -> list[Event]:
    """Events for the conditions that changed from `previous` to `current`."""
    before = {c.type: c for c in (previous.conditions if previous else [])}
    now = {c.type: c for c in current.conditions}
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
                events.append(Event(_N, *recovery))
            continue
        if _said_otherwise(condition, old, now):
            continue
        announced = _announcement(condition)
        if announced is not None:
            events.append(announced)
    return events
