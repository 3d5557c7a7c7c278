"""GPU accounting: GPU-seconds allocated while Running and lost to failures, across attempts,
settled once per Running interval; and their export as Prometheus metrics."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest

from rlhf_operator.api.v1alpha1 import Usage
from rlhf_operator.controllers.metrics import Metrics
from rlhf_operator.reconcile.decide import decide, status_patch
from rlhf_operator.reconcile.observed import Observed
from rlhf_operator.reconcile.usage import account, allocated_now
from rlhf_operator.settings import OperatorSettings

from .factories import job_body, ray_job

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


RUNNING_SINCE_0 = Usage(attempts=1, running_since=stamp(0))


@dataclass(frozen=True)
class Row:
    id: str
    previous: Usage | None
    running: bool
    now: float
    expect: Usage
    ended_at: float | None = None
    failed: bool = False
    checkpoint_at: float | None = None
    gpus: int = 8


TABLE = [
    Row("starts-running", Usage(attempts=1), True, 10, Usage(attempts=1, running_since=stamp(10))),
    Row("keeps-running: nothing settles", RUNNING_SINCE_0, True, 500, RUNNING_SINCE_0),
    Row(
        "succeeds: settled at KubeRay's end time",
        RUNNING_SINCE_0,
        False,
        130,
        Usage(attempts=1, gpu_seconds_allocated=100 * 8),
        ended_at=100,
    ),
    Row(
        "fails: lost since the last checkpoint",
        RUNNING_SINCE_0,
        False,
        100,
        Usage(attempts=1, gpu_seconds_allocated=100 * 8, gpu_seconds_lost=40 * 8),
        failed=True,
        checkpoint_at=60,
    ),
    Row(
        "fails with a checkpoint of an earlier attempt: lost since this one started",
        Usage(attempts=2, gpu_seconds_allocated=800, running_since=stamp(200)),
        False,
        300,
        Usage(attempts=2, gpu_seconds_allocated=800 + 100 * 8, gpu_seconds_lost=100 * 8),
        failed=True,
        checkpoint_at=60,
    ),
    Row(
        "fails before running: nothing allocated, nothing lost",
        Usage(attempts=1),
        False,
        100,
        Usage(attempts=1),
        failed=True,
    ),
    Row(
        "suspended: allocated, not lost",
        RUNNING_SINCE_0,
        False,
        50,
        Usage(attempts=1, gpu_seconds_allocated=50 * 8),
    ),
    Row(
        "an end time from a skewed clock never runs backwards",
        RUNNING_SINCE_0,
        False,
        50,
        Usage(attempts=1),
        ended_at=-30,
    ),
    Row("cpu-devices: no gpu time", RUNNING_SINCE_0, False, 50, Usage(attempts=1), gpus=0),
]


@pytest.mark.parametrize("row", TABLE, ids=lambda r: r.id.split(":")[0])
def test_account(row: Row) -> None:
    got = account(
        row.previous,
        running=row.running,
        gpus=row.gpus,
        now=at(row.now),
        attempts=1,
        ended_at=at(row.ended_at) if row.ended_at is not None else None,
        failed=row.failed,
        checkpoint_at=at(row.checkpoint_at) if row.checkpoint_at is not None else None,
    )
    assert got == row.expect


def test_allocated_now_adds_the_running_interval() -> None:
    usage = Usage(attempts=2, gpu_seconds_allocated=1000, running_since=stamp(0))
    assert allocated_now(usage, 8, at(30)) == 1000 + 30 * 8
    assert allocated_now(Usage(gpu_seconds_allocated=1000), 8, at(30)) == 1000


def _walk(steps: list[tuple[float, list[dict[str, Any]], dict[str, Any] | None]]) -> list[Any]:
    """Successive passes of decide, storing each status as the API server would."""
    stored: dict[str, Any] | None = None
    decisions = []
    for seconds, ray_jobs, trainer in steps:
        status = dict(stored or {})
        if trainer is not None:
            status["trainer"] = trainer
        body = job_body(status=status or None)
        decisions.append(decide(body, Observed.of(ray_jobs), SETTINGS, at(seconds)))
        stored = decisions[-1].status.to_manifest()
    return decisions


def test_usage_across_a_failed_and_a_successful_attempt() -> None:
    checkpoint = {"checkpoints": [{"step": 10, "path": "/ck/10", "time": stamp(160)}]}
    failed = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "endTime": stamp(200)}
    done = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": stamp(1000)}
    decisions = _walk(
        [
            (0, [], None),
            (60, [ray_job(0, "Initializing")], None),
            (100, [ray_job(0, "Running", "RUNNING")], None),
            (170, [ray_job(0, "Running", "RUNNING")], checkpoint),
            (215, [ray_job(0, message="exit code 1", **failed)], checkpoint),
            (300, [ray_job(1, "Running", "RUNNING")], checkpoint),
            (1010, [ray_job(1, **done)], checkpoint),
        ]
    )
    gpus = decisions[0].status.total_gpus
    assert gpus
    usage = [d.status.usage for d in decisions]
    assert usage[2] == Usage(attempts=1, running_since=stamp(100))
    # A trainer report while running changes nothing in usage: no status patch for it.
    assert status_patch(decisions[2].status.to_manifest(), decisions[3].status).get("usage") is None
    # Attempt 0 ran 100 s (from 100 to KubeRay's end at 200); 40 s since its checkpoint lost.
    assert usage[4] == Usage(
        attempts=1, gpu_seconds_allocated=100 * gpus, gpu_seconds_lost=40 * gpus
    )
    assert usage[6] == Usage(
        attempts=2, gpu_seconds_allocated=(100 + 700) * gpus, gpu_seconds_lost=40 * gpus
    )


def test_metrics_export_usage_by_namespace_and_job() -> None:
    body = job_body(
        status={
            "totalGpus": 8,
            "usage": {
                "attempts": 2,
                "gpuSecondsAllocated": 1000,
                "gpuSecondsLost": 120,
                "runningSince": stamp(0),
            },
        }
    )
    metrics = Metrics(jobs=lambda: [body], clock=lambda: at(30))
    text = generate_latest(metrics.registry).decode()
    labels = '{job="ppo-7b",namespace="team-a"}'
    assert f"rlhf_operator_job_gpu_seconds_allocated_total{labels} 1240.0" in text
    assert f"rlhf_operator_job_gpu_seconds_lost_total{labels} 120.0" in text
    assert f"rlhf_operator_job_attempts{labels} 2.0" in text
