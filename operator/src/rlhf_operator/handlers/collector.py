"""Python's cyclic garbage collector, set for a process that holds thousands of jobs.

With its default (a young collection every 700 allocations), the JSON of a burst's passes in
flight was promoted to the old generations, whose full collections (each scanning every object
the watch caches hold) took 29 % of the operator's CPU at 2,000 jobs (bench/operator_scale.py
with a gc.callbacks probe: 40 full collections of ~140 ms). A young collection every 50,000
allocations lets that JSON die young; the objects of the start (modules, classes, kopf's and
pydantic's machinery) are frozen out of every collection. 2,000 jobs: 14.3 -> 11.0 ms of CPU a
job, the RSS no higher (GC_THRESHOLDS below, measured against 10,000 and 700).

The young generation's count is allocations less deallocations, and an old object freed counts
too: where new objects replace old ones (each watch event's index entry, the parse memo's),
the count stays low while the young generation grows. At 5,000 jobs its collections came every
~14 s and scanned ~300,000 objects each (~300 ms, nothing collected), and one of them fell in
the first second of a burst of new jobs, whose users waited on it. So the young collection also
runs when the operator has nothing to do (`IdleCollector`): a burst then starts with an empty
young generation, and the collections within it scan only what the burst made (a burst of
500 beside 5,000 jobs, three alternated pairs: p50 create -> RayJob 2.22, 2.27, 2.14 -> 2.00,
2.05, 2.05 s; docs/scale.md).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

GC_THRESHOLDS = (50_000, 20, 10)
# How long the operator is to have had no pass at work before its collector runs.
IDLE_COLLECT_SECONDS = 0.5


def tune_gc() -> None:
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def due_generation(counts: tuple[int, int, int], thresholds: tuple[int, int, int]) -> int:
    """The generation to collect now: the middle one where the young collection would make
    its count pass its threshold (Python's own rule), else the young one."""
    return 1 if counts[1] + 1 > thresholds[1] else 0


class IdleCollector:
    """Runs the young collection (and the middle one when it is due by Python's own rule) once
    the operator has been idle for `delay` seconds: `soon()` is called whenever its last pass
    ends, `is_idle` says whether it still is when the delay is up. The oldest generation's
    collections are left to Python (it runs them only once the objects that survived since the
    last grew by a quarter: a full collection on each idle moment would scan every job's
    objects each time)."""

    def __init__(
        self,
        is_idle: Callable[[], bool],
        delay: float = IDLE_COLLECT_SECONDS,
        *,
        collect: Callable[[int], int] = gc.collect,
    ) -> None:
        self._is_idle = is_idle
        self._delay = delay
        self._collect = collect
        self._timer: asyncio.TimerHandle | None = None

    def soon(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(self._delay, self._run)

    def _run(self) -> None:
        self._timer = None
        if not self._is_idle():
            return  # a pass started meanwhile: its end asks again
        generation = due_generation(gc.get_count(), gc.get_threshold())
        started = time.process_time()
        collected = self._collect(generation)
        logger.debug(
            "idle: collected generation %d in %.1f ms (%d unreachable)",
            generation,
            1000 * (time.process_time() - started),
            collected,
        )
