"""Conditions of an RLHFJob: the in-place updater that keeps lastTransitionTime stable, the
RFC 3339 time helpers, and which Failed reasons are final (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from rlhf_trainer.config.guardrails import Guard

from ..api.v1alpha1 import (
    Condition,
    ConditionReason,
    ConditionStatus,
    ConditionType,
    RLHFJobStatus,
)

T, F = ConditionStatus.TRUE, ConditionStatus.FALSE
R = ConditionReason

# Valid=False: why the spec cannot run as written.
REFUSALS = {R.SPEC_INVALID, R.POLICY_VIOLATION, R.PLACEMENT_IMPOSSIBLE}
# Failed for one of these reasons is final; Failed for an invalid spec recovers when fixed.
TERMINAL_FAILURES = {
    R.JOB_FAILED,
    R.BACKOFF_LIMIT_EXCEEDED,
    R.DEADLINE_EXCEEDED,
    R.STARTUP_TIMEOUT,
    R.NOT_RETRYABLE,
    R.GUARDRAIL_TRIPPED,
}
# Healthy=False names the guard that tripped.
GUARD_REASONS = {
    Guard.NON_FINITE: R.NON_FINITE_METRIC,
    Guard.KL: R.KL_ABOVE_BOUND,
    Guard.SHORT_RESPONSES: R.RESPONSES_TOO_SHORT,
    Guard.LONG_RESPONSES: R.RESPONSES_TRUNCATED,
    Guard.REWARD_EVAL_DIVERGENCE: R.REWARD_EVAL_DIVERGENCE,
    Guard.ENTROPY: R.ENTROPY_COLLAPSE,
}
# Failed for these reasons stops a still-existing RayJob (its pods hold GPUs).
STOPPING_FAILURES = {R.DEADLINE_EXCEEDED, R.STARTUP_TIMEOUT}
_ORDER = list(ConditionType)


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
