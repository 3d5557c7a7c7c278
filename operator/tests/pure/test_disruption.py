"""Whole-job preemption, as the operator sees it: the pods of a running attempt get the
`DisruptionTarget` condition (an eviction, a drain, a preemption), the job says Disrupted=True
(kept once the pods are gone), and the attempt's failure is classed Preempted (retried, not
charged to runPolicy.backoffLimit) unless the trainer found a class of its own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlhf_operator.api.v1alpha1 import ConditionReason, ConditionType, EventType, Phase
from rlhf_operator.reconcile.decide import decide
from rlhf_operator.reconcile.diagnosis import Verdict, describe_disruption, disruption_verdict
from rlhf_operator.reconcile.observed import Observed, PodObservation
from rlhf_operator.settings import OperatorSettings
from rlhf_trainer.config import FailureClass

from .factories import conditions, job_body, ray_job

NOW = datetime(2026, 12, 2, 1, 0, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
EVICTED = "EvictionByEvictionAPI: Eviction API: evicting"
RUNNING = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
FAILED = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed"}
STOPPED = {"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}


def _ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, condition: dict[str, Any] | None = None, phase: str = "Running") -> Any:
    conds = [{"type": "Ready", "status": "True"}] + ([condition] if condition else [])
    return {"metadata": {"name": name}, "status": {"phase": phase, "conditions": conds}}


def disruption(reason: str = "EvictionByEvictionAPI", status: str = "True") -> dict[str, Any]:
    message = {"EvictionByEvictionAPI": "Eviction API: evicting"}.get(reason, "")
    return {"type": "DisruptionTarget", "status": status, "reason": reason, "message": message}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (pod("h", disruption()), EVICTED),
        (pod("h", disruption("PreemptionByScheduler")), "PreemptionByScheduler"),
        (pod("h", disruption(status="False")), None),
        (pod("h"), None),
    ],
    ids=["evicted", "preempted-by-the-scheduler", "condition-false", "no-condition"],
)
def test_a_pods_disruption_is_its_disruption_target_condition(
    body: dict[str, Any], expected: str | None
) -> None:
    assert PodObservation.from_object(body).disruption == expected


def test_pods_with_the_same_cause_are_named_once() -> None:
    pods = [
        PodObservation("job-head", disruption=EVICTED),
        PodObservation("job-worker-a", disruption=EVICTED),
        PodObservation("job-worker-b", disruption="DeletionByTaintManager"),
        PodObservation("job-submitter"),
    ]
    assert describe_disruption(pods) == (
        f"pod job-head (and 1 more): {EVICTED}; pod job-worker-b: DeletionByTaintManager"
    )
    assert describe_disruption([PodObservation("quiet")]) is None


@dataclass(frozen=True)
class VerdictRow:
    id: str
    verdict: Verdict | None
    disruption: str | None
    expected: FailureClass | None
    exit_code: int | None = None


INFRA = Verdict(FailureClass.INFRASTRUCTURE, 1, "RayActorError: the actor died")
VERDICTS = [
    VerdictRow("no-word-no-disruption: still unknown", None, None, None),
    VerdictRow("no-word-but-disrupted: preempted", None, EVICTED, FailureClass.PREEMPTED),
    VerdictRow(
        "infrastructure-and-disrupted: preempted", INFRA, EVICTED, FailureClass.PREEMPTED, 1
    ),
    VerdictRow("infrastructure-undisrupted: charged", INFRA, None, FailureClass.INFRASTRUCTURE, 1),
    VerdictRow(
        "trainer-found-its-spec-wrong: stands",
        Verdict(FailureClass.INVALID_SPEC, 78, "data.train[0]: no such file"),
        EVICTED,
        FailureClass.INVALID_SPEC,
        78,
    ),
    VerdictRow(
        "a-guardrail-tripped: stands",
        Verdict(FailureClass.UNHEALTHY, 65, "maxKl tripped at step 4"),
        EVICTED,
        FailureClass.UNHEALTHY,
        65,
    ),
]


@pytest.mark.parametrize("row", VERDICTS, ids=lambda r: r.id.split(":")[0])
def test_a_disrupted_attempt_is_preempted_unless_the_trainer_said_otherwise(
    row: VerdictRow,
) -> None:
    got = disruption_verdict(row.verdict, row.disruption)
    assert (got.failure_class if got else None) is row.expected
    assert (got.exit_code if got else None) == row.exit_code
    if row.verdict is None and got is not None:
        assert EVICTED in got.detail


def test_the_disruption_of_a_running_attempt_is_on_status_and_announced() -> None:
    body = job_body(status={"phase": "Running"})
    observed = Observed(
        ray_jobs=Observed.of([ray_job(0, **RUNNING)]).ray_jobs,
        disrupted=(
            PodObservation("ppo-7b-r0-head", disruption=EVICTED),
            PodObservation("ppo-7b-r0-worker", disruption=EVICTED),
        ),
    )
    decision = decide(body, observed, SETTINGS, NOW)
    got = decision.status
    assert got.phase is Phase.RUNNING  # its pods are still checkpointing
    assert conditions(got)["Disrupted"] == ("True", "Preempted")
    [said] = [c for c in got.conditions if c.type is ConditionType.DISRUPTED]
    assert (
        said.message == f"attempt 0 (RayJob ppo-7b-r0): pod ppo-7b-r0-head (and 1 more): {EVICTED}"
    )
    [event] = [e for e in decision.events if e.message == said.message]
    assert (event.type, event.reason) == (EventType.WARNING, ConditionReason.PREEMPTED)
    # Once the pods are gone, the condition stays (the attempt's failure comes later).
    later = decide(
        job_body(status=got.model_dump(mode="json", by_alias=True, exclude_none=True)),
        Observed.of([ray_job(0, **RUNNING)]),
        SETTINGS,
        NOW + timedelta(seconds=5),
    )
    assert conditions(later.status)["Disrupted"] == ("True", "Preempted")
    assert not [e for e in later.events if e.reason is ConditionReason.PREEMPTED]


DISRUPTED_BEFORE = {
    "type": "Disrupted",
    "status": "True",
    "reason": "Preempted",
    "message": f"attempt 0 (RayJob ppo-7b-r0): pod ppo-7b-r0-head: {EVICTED}",
    "lastTransitionTime": "2026-12-02T00:59:00Z",
}


@pytest.mark.parametrize(
    "ray_job_status",
    [
        # No word from the trainer (its driver was killed) long after the end.
        {**STOPPED, "endTime": "2026-12-02T00:59:30Z"},
        # Ray's exit code 1: ranks lost with their pods (Infrastructure by itself).
        {**FAILED, "message": "Job entrypoint command failed with exit code 1"},
    ],
    ids=["no-word", "exit-code-1"],
)
def test_a_disrupted_attempt_that_fails_is_retried_as_a_preemption(
    ray_job_status: dict[str, Any],
) -> None:
    body = job_body(
        status={"phase": "Running", "conditions": [DISRUPTED_BEFORE]},
        runPolicy={"backoffLimit": 0},
    )
    decision = decide(body, Observed.of([ray_job(0, **ray_job_status)]), SETTINGS, NOW)
    got = decision.status
    assert got.phase is Phase.PENDING, got.message
    assert (got.restarts, got.preemptions) == (1, 1)  # backoffLimit 0: not charged
    assert conditions(got)["Restarted"] == ("True", "Preempted")
    assert "Disrupted" not in conditions(got)  # it spoke of attempt 0
    assert "its pods were disrupted" in (got.message or "")
    assert [d.name for d in decision.apply if d.kind == "RayJob"] == ["ppo-7b-r1"]


def test_the_trainers_own_preemption_is_counted_once() -> None:
    trainer = {
        "outcome": {
            "attempt": 0,
            "exitCode": 75,
            "failureClass": "Preempted",
            "message": "preempted (SIGTERM) after 29 completed steps; final checkpoint: step-29",
        }
    }
    body = job_body(
        status={"phase": "Running", "conditions": [DISRUPTED_BEFORE], "trainer": trainer}
    )
    got = decide(body, Observed.of([ray_job(0, **STOPPED)]), SETTINGS, NOW).status
    assert (got.restarts, got.preemptions) == (1, 1)
    assert "final checkpoint: step-29" in (got.message or "")


def test_an_undisrupted_attempt_with_no_word_is_still_charged() -> None:
    body = job_body(status={"phase": "Running"}, runPolicy={"backoffLimit": 1})
    observed = Observed.of([ray_job(0, **STOPPED, endTime="2026-12-02T00:59:30Z")])
    got = decide(body, observed, SETTINGS, NOW).status
    assert (got.restarts, got.preemptions) == (1, 0)
    assert conditions(got)["Restarted"] == ("True", "Retrying")


PREEMPTED_OUTCOME = {
    "outcome": {
        "attempt": 0,
        "exitCode": 75,
        "failureClass": "Preempted",
        "message": "preempted (SIGTERM) after 12 completed steps; final checkpoint: step-12",
    }
}


@pytest.mark.parametrize(
    ("disrupted", "trainer", "restarted"),
    [
        (True, PREEMPTED_OUTCOME, True),
        (True, None, False),  # the driver has not said: its checkpoint is still being written
        (False, PREEMPTED_OUTCOME, False),  # KubeRay says when the attempt ended
    ],
    ids=["disrupted-and-the-driver-said", "disrupted-driver-silent", "undisrupted"],
)
def test_a_disrupted_attempt_ends_when_its_driver_says_so(
    disrupted: bool, trainer: dict[str, Any] | None, restarted: bool
) -> None:
    """KubeRay recreates a lost cluster's pods (and may submit the job again to the new head):
    the driver's Preempted outcome is the disrupted attempt's end."""
    status: dict[str, Any] = {"phase": "Running"}
    if disrupted:
        status["conditions"] = [DISRUPTED_BEFORE]
    if trainer is not None:
        status["trainer"] = trainer
    body = job_body(status=status, runPolicy={"backoffLimit": 0})
    decision = decide(body, Observed.of([ray_job(0, **RUNNING)]), SETTINGS, NOW)
    got = decision.status
    if not restarted:
        assert got.phase is Phase.RUNNING and got.restarts == 0
        assert decision.delete_ray_jobs == ()
        return
    assert (got.phase, got.restarts, got.preemptions) == (Phase.PENDING, 1, 1)
    assert "final checkpoint: step-12" in (got.message or "")
    assert decision.delete_ray_jobs == ("ppo-7b-r0",)  # the recreated pods go with it
    assert [d.name for d in decision.apply if d.kind == "RayJob"] == ["ppo-7b-r1"]
