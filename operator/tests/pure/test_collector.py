"""The operator's garbage collector (`handlers.collector`): its thresholds, and the young
collection it runs once the operator has been idle for a moment."""

from __future__ import annotations

import asyncio
import gc

from rlhf_operator.handlers.collector import GC_THRESHOLDS, IdleCollector, due_generation, tune_gc


def test_the_operator_tunes_the_garbage_collector_for_thousands_of_jobs() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0  # what was loaded is out of every collection
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_the_middle_generation_is_collected_when_python_would_collect_it_next() -> None:
    assert due_generation((123, 0, 0), (50_000, 20, 10)) == 0
    assert due_generation((0, 19, 3), (50_000, 20, 10)) == 0
    assert due_generation((0, 20, 3), (50_000, 20, 10)) == 1  # the next young one makes 21
    # The oldest is Python's to decide (it also weighs how much survived since its last).
    assert due_generation((0, 3, 500), (50_000, 20, 10)) == 0


async def test_the_idle_collector_runs_once_after_the_last_pass_and_not_while_one_runs() -> None:
    busy = [False]
    collected: list[int] = []
    collector = IdleCollector(lambda: not busy[0], 0.01, collect=lambda g: collected.append(g) or 0)
    for _ in range(3):  # passes ending one after the other: one collection, after the last
        collector.soon()
    await asyncio.sleep(0.05)
    assert collected == [0]
    collector.soon()
    busy[0] = True  # a pass started before the delay was up: its own end asks again
    await asyncio.sleep(0.05)
    assert collected == [0]
