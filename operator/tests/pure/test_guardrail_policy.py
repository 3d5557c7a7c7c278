"""What the run policy does when the trainer stops an attempt at a guardrail (outcome
`Unhealthy`, exit 65): Healthy=False naming the guard and an Event quoting the trainer's words;
then suspended until the spec changes (action: suspend, the default), after which the next
attempt resumes from the checkpoint without spending runPolicy.backoffLimit; or failed for good
(action: fail)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rlhf_operator.api.v1alpha1 import ConditionReason, EventType, Phase
from rlhf_operator.reconcile.decide import decide
from rlhf_operator.reconcile.observed import Observed
from rlhf_operator.settings import OperatorSettings

from .factories import conditions, job_body, ray_job

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
FAILED = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed"}
TRIP = (
    "guardrail runPolicy.guardrails.maxKl tripped at step 4: kl (mean per-token KL to the "
    "reference) is 0.0123 > 1e-09; suspending the job after checkpointing the last consistent "
    "step (raise or turn off runPolicy.guardrails.maxKl to go on); final checkpoint: "
    "/storage/ppo-7b/checkpoints/step-4"
)
OUTCOME = {"outcome": {"attempt": 0, "exitCode": 65, "failureClass": "Unhealthy", "message": TRIP}}


def step(status: dict[str, Any] | None, generation: int = 1, **policy: Any) -> Any:  # the Decision
    body = job_body(
        generation=generation,
        status={**(status or {}), "trainer": OUTCOME},
        runPolicy={"backoffLimit": 0, **policy},
    )
    return decide(body, Observed.of([ray_job(0, **FAILED)]), SETTINGS, NOW)


def as_status(decision: Any) -> dict[str, Any]:
    return dict(decision.status.model_dump(mode="json", by_alias=True, exclude_none=True))


def test_a_trip_suspends_with_the_guard_named_until_the_spec_changes() -> None:
    tripped = step(None)
    got = tripped.status
    assert got.phase is Phase.SUSPENDED, got.message
    assert conditions(got)["Healthy"] == ("False", "KLAboveBound")
    assert conditions(got)["Suspended"] == ("True", "GuardrailTripped")
    healthy = next(c for c in got.conditions if c.type == "Healthy")
    assert healthy.message == TRIP and healthy.observed_generation == 1
    assert (got.restarts, got.guardrail_trips) == (0, 1)
    [event] = [e for e in tripped.events if e.reason is ConditionReason.KL_ABOVE_BOUND]
    assert event.type is EventType.WARNING and event.message == TRIP
    assert [d.name for d in tripped.apply if d.kind == "RayJob"] == ["ppo-7b-r0"]  # no new one

    again = step(as_status(tripped))  # the same spec: stays suspended, nothing announced twice
    assert again.status.phase is Phase.SUSPENDED and again.status.guardrail_trips == 1
    assert not [e for e in again.events if e.reason is ConditionReason.KL_ABOVE_BOUND]
    assert [d.name for d in again.apply if d.kind == "RayJob"] == ["ppo-7b-r0"]

    raised = step(as_status(again), generation=2, guardrails={"maxKl": 10})
    got = raised.status
    assert got.phase is Phase.PENDING, got.message
    assert conditions(got)["Healthy"] == ("True", "GuardrailResumed")
    assert conditions(got)["Suspended"] == ("False", "Resumed")
    # backoffLimit 0, and still restarted: a resume after a trip is not a retry.
    assert (got.restarts, got.guardrail_trips) == (1, 1)
    assert [d.name for d in raised.apply if d.kind == "RayJob"] == ["ppo-7b-r1"]


def test_action_fail_fails_for_good() -> None:
    failed = step(None, guardrails={"action": "fail"})
    got = failed.status
    assert got.phase is Phase.FAILED, got.message
    assert conditions(got)["Failed"] == ("True", "GuardrailTripped")
    assert conditions(got)["Healthy"] == ("False", "KLAboveBound")
    assert TRIP in (got.message or "")
    assert [d.name for d in failed.apply if d.kind == "RayJob"] == []
