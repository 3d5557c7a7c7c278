"""Failure classes: how a failed attempt is classed (the trainer's outcome for that attempt,
else the exit code in KubeRay's message), and what the run policy does with each class."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlhf_operator.api.v1alpha1 import ConditionReason, EventType, Phase
from rlhf_operator.reconcile.decide import decide
from rlhf_operator.reconcile.diagnosis import bounded, exit_code_in
from rlhf_operator.reconcile.observed import Observed
from rlhf_operator.settings import OperatorSettings

from .factories import conditions, job_body, ray_job

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
T, F = "True", "False"
RAY_MESSAGE = "Job entrypoint command failed with exit code {code}, last available logs: ..."


def _ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def outcome(attempt: int, code: int, kind: str | None, message: str = "") -> dict[str, Any]:
    return {
        "outcome": {
            "attempt": attempt,
            "exitCode": code,
            "failureClass": kind,
            "message": message,
        }
    }


@dataclass(frozen=True)
class Row:
    id: str
    ray_jobs: list[dict[str, Any]]
    phase: Phase
    expect: dict[str, tuple[str, str]]
    restarts: int = 0
    preemptions: int = 0
    trainer: dict[str, Any] | None = None
    status: dict[str, Any] = field(default_factory=dict)
    backoff_limit: int = 3
    next_ray_job: str | None = None
    message: str = ""


FAILED = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed"}
TABLE = [
    Row(
        "trainer-says-invalid-spec: failed at once, no retry",
        [ray_job(0, **FAILED)],
        Phase.FAILED,
        {"Failed": (T, "NotRetryable"), "Running": (F, "NotRetryable")},
        trainer=outcome(0, 78, "InvalidSpec", "data.train[0].inputKey: 'prompt' not in org/x"),
        message="InvalidSpec, exit code 78: data.train[0].inputKey: 'prompt' not in org/x",
    ),
    Row(
        "trainer-says-preempted: retried, not counted",
        [ray_job(0, **FAILED)],
        Phase.PENDING,
        {"Restarted": (T, "Preempted")},
        restarts=1,
        preemptions=1,
        trainer=outcome(0, 75, "Preempted", "SIGTERM: checkpoint of step 40 written"),
        backoff_limit=0,
        next_ray_job="ppo-7b-r1",
        message="do not count against runPolicy.backoffLimit",
    ),
    Row(
        "infrastructure-after-two-preemptions: the budget is still whole",
        [ray_job(2, **FAILED)],
        Phase.PENDING,
        {"Restarted": (T, "Retrying")},
        restarts=3,
        preemptions=2,
        trainer=outcome(2, 1, "Infrastructure", "NCCL timeout"),
        status={"restarts": 2, "preemptions": 2},
        backoff_limit=1,
        next_ray_job="ppo-7b-r3",
        message="restart 1 of 1",
    ),
    Row(
        "infrastructure-with-the-budget-spent",
        [ray_job(3, **FAILED)],
        Phase.FAILED,
        {"Failed": (T, "BackoffLimitExceeded")},
        restarts=3,
        preemptions=2,
        trainer=outcome(3, 1, "Infrastructure", "NCCL timeout"),
        status={"restarts": 3, "preemptions": 2},
        backoff_limit=1,
        message="runPolicy.backoffLimit (1) reached",
    ),
    Row(
        "an-earlier-attempts-outcome-is-not-this-ones",
        [ray_job(1, **FAILED, endTime=_ago(60))],
        Phase.PENDING,
        {"Restarted": (T, "Retrying")},
        restarts=2,
        trainer=outcome(0, 78, "InvalidSpec", "old news"),
        status={"restarts": 1},
        next_ray_job="ppo-7b-r2",
        message="Infrastructure: AppFailed",
    ),
    Row(
        "kuberay-quotes-exit-code-78",
        [ray_job(0, **{**FAILED, "message": RAY_MESSAGE.format(code=78)})],
        Phase.FAILED,
        {"Failed": (T, "NotRetryable")},
        message="InvalidSpec, exit code 78",
    ),
    Row(
        "kuberay-quotes-exit-code-75",
        [ray_job(0, **{**FAILED, "message": RAY_MESSAGE.format(code=75)})],
        Phase.PENDING,
        {"Restarted": (T, "Preempted")},
        restarts=1,
        preemptions=1,
        next_ray_job="ppo-7b-r1",
    ),
    Row(
        "oom-killed-exit-code-is-infrastructure",
        [ray_job(0, **{**FAILED, "message": RAY_MESSAGE.format(code=-9)})],
        Phase.PENDING,
        {"Restarted": (T, "Retrying")},
        restarts=1,
        next_ray_job="ppo-7b-r1",
        message="Infrastructure, exit code -9",
    ),
    Row(
        "trainer-exited-0-but-the-rayjob-failed-is-infrastructure",
        [ray_job(0, **FAILED)],
        Phase.PENDING,
        {"Restarted": (T, "Retrying")},
        restarts=1,
        trainer=outcome(0, 0, None),
        next_ray_job="ppo-7b-r1",
    ),
    Row(
        "a-success-keeps-an-earlier-class-beside-exit-0: still infrastructure",
        [ray_job(1, **FAILED)],
        Phase.PENDING,
        {"Restarted": (T, "Retrying")},
        restarts=2,
        preemptions=1,
        trainer=outcome(1, 0, "Preempted"),
        status={"restarts": 1, "preemptions": 1},
        next_ray_job="ppo-7b-r2",
    ),
    Row(
        "no-word-yet: waits for the trainer's outcome",
        [ray_job(0, **FAILED, endTime=_ago(3))],
        Phase.RUNNING,
        {"Running": (T, "Training")},
        status={
            "phase": "Running",
            "conditions": [
                {
                    "type": "Running",
                    "status": "True",
                    "reason": "Training",
                    "lastTransitionTime": _ago(600),
                }
            ],
        },
        message="waiting for the trainer's report",
    ),
    Row(
        "no-word-after-the-grace: infrastructure",
        [ray_job(0, **FAILED, endTime=_ago(11))],
        Phase.PENDING,
        {"Restarted": (T, "Retrying")},
        restarts=1,
        next_ray_job="ppo-7b-r1",
    ),
]


@pytest.mark.parametrize("row", TABLE, ids=lambda r: r.id.split(":")[0])
def test_failure_classes(row: Row) -> None:
    status = {**row.status, **({"trainer": row.trainer} if row.trainer else {})}
    body = job_body(status=status or None, runPolicy={"backoffLimit": row.backoff_limit})
    decision = decide(body, Observed.of(row.ray_jobs), SETTINGS, NOW)
    got = decision.status
    assert got.phase is row.phase, got.message
    for kind, expected in row.expect.items():
        assert conditions(got).get(kind) == expected, (kind, conditions(got))
    assert (got.restarts, got.preemptions) == (row.restarts, row.preemptions)
    assert row.message in (got.message or "")
    ray_jobs = [d.name for d in decision.apply if d.kind == "RayJob"]
    if row.next_ray_job is not None:
        assert ray_jobs == [row.next_ray_job]
    if got.phase.is_finished:
        assert ray_jobs == [] and got.completion_time is not None


def test_waiting_for_the_outcome_looks_again_when_the_grace_ends() -> None:
    body = job_body(status={"phase": "Running"})
    observed = Observed.of([ray_job(0, **FAILED, endTime=_ago(3))])
    decision = decide(body, observed, SETTINGS, NOW)
    assert decision.requeue_after == pytest.approx(7)
    assert [d.name for d in decision.apply if d.kind == "RayJob"] == ["ppo-7b-r0"]  # unchanged


def test_the_class_has_its_event() -> None:
    invalid = decide(
        job_body(status={"trainer": outcome(0, 78, "InvalidSpec", "reward_func.py: no module")}),
        Observed.of([ray_job(0, **FAILED)]),
        SETTINGS,
        NOW,
    )
    [event] = [e for e in invalid.events if e.reason is ConditionReason.NOT_RETRYABLE]
    assert event.type is EventType.WARNING and "reward_func.py: no module" in event.message
    preempted = decide(
        job_body(status={"trainer": outcome(0, 75, "Preempted")}),
        Observed.of([ray_job(0, **FAILED)]),
        SETTINGS,
        NOW,
    )
    [event] = [e for e in preempted.events if e.reason is ConditionReason.PREEMPTED]
    assert event.type is EventType.NORMAL


def test_kuberays_message_is_bounded_on_status() -> None:
    logs = "x" * 20_000 + "ValueError: the real error"
    message = RAY_MESSAGE.format(code=1) + logs
    decision = decide(
        job_body(status={"phase": "Running"}),
        Observed.of([ray_job(0, "Running", "RUNNING", message=message)]),
        SETTINGS,
        NOW,
    )
    assert decision.status.ray_job is not None
    kept = decision.status.ray_job.message or ""
    assert len(kept) == 1024
    assert kept.startswith("Job entrypoint command failed with exit code 1")
    assert kept.endswith("ValueError: the real error") and "…" in kept


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("0123456789", 10, "0123456789"),
        ("0123456789A", 10, "012…56789A"),
    ],
    ids=["under", "at-limit", "over-keeps-head-and-tail"],
)
def test_bounded(text: str, limit: int, expected: str) -> None:
    assert bounded(text, limit) == expected


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (RAY_MESSAGE.format(code=78), 78),
        ("Job entrypoint command failed with exit code -9", -9),
        ("Job failed due to an application error, last available logs: ...", None),
        (None, None),
    ],
    ids=["ray-78", "ray-signal", "no-code", "no-message"],
)
def test_exit_code_in_kuberay_message(message: str | None, code: int | None) -> None:
    assert exit_code_in(message) == code
