"""GPU accounting of an RLHFJob (pure): GPU-seconds allocated while Running, and GPU-seconds
of training lost to failed attempts, across attempts.

Level-based and settled per Running interval: the interval's start is kept in
`usage.runningSince`; when the interval ends (success, failure, preemption, suspension) its
GPU-seconds are added once, in the pass that sees it end, and `runningSince` is cleared. So the
stored status changes only when something happens, and `allocated_now` gives the live value.
"""

from __future__ import annotations

from datetime import datetime

from ..api.v1alpha1 import TrainerReport, Usage
from .conditions import format_time, parse_time


def last_checkpoint_time(report: TrainerReport | None) -> datetime | None:
    if report is None or not report.checkpoints:
        return None
    return parse_time(max(report.checkpoints, key=lambda c: c.step).time)


def account(
    previous: Usage | None,
    *,
    running: bool,
    gpus: int,
    now: datetime,
    attempts: int,
    ended_at: datetime | None = None,
    failed: bool = False,
    checkpoint_at: datetime | None = None,
) -> Usage:
    """The usage after this pass.

    `running`: the job is Running now. `ended_at`: when the attempt that was running ended
    (KubeRay's endTime; `now` if unknown). `failed`: that attempt failed (it is lost from its
    last checkpoint, `checkpoint_at`, or from its start if it has none since)."""
    usage = previous or Usage()
    since = parse_time(usage.running_since)
    allocated, lost = usage.gpu_seconds_allocated, usage.gpu_seconds_lost
    running_since = usage.running_since
    if running and since is None:
        running_since = format_time(now)
    elif not running and since is not None:
        # Clamped: KubeRay's clock or a late observation must not make time run backwards.
        end = min(max(ended_at or now, since), now)
        allocated += round((end - since).total_seconds() * gpus)
        if failed:
            lost_from = max(since, checkpoint_at) if checkpoint_at is not None else since
            lost += round(max(0.0, (end - lost_from).total_seconds()) * gpus)
        running_since = None
    return Usage(
        attempts=max(usage.attempts, attempts),
        gpu_seconds_allocated=allocated,
        gpu_seconds_lost=lost,
        running_since=running_since,
    )


def allocated_now(usage: Usage, total_gpus: int, now: datetime) -> float:
    """GPU-seconds allocated up to `now`, the current Running interval included."""
    since = parse_time(usage.running_since)
    live = 0.0
    if since is not None and now > since:
        live = (now - since).total_seconds() * total_gpus
    return usage.gpu_seconds_allocated + live
