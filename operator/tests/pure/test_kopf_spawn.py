"""kopf's workers spawned without a pause (`handlers.kopf_spawn`): installed on the kopf it was
written against, idempotent, and a scheduler that still runs, limits and closes as kopf's."""

from __future__ import annotations

import asyncio

import pytest
from kopf._cogs.aiokits import aiotasks

from rlhf_operator.handlers import kopf_spawn
from rlhf_operator.handlers.kopf_spawn import spawn_workers_without_pause


def test_installed_on_the_pinned_kopf_and_idempotent() -> None:
    """Fails on a kopf upgrade whose spawn differs (the shim would leave it, and its pause)."""
    assert spawn_workers_without_pause()
    assert spawn_workers_without_pause()
    assert aiotasks.Scheduler.spawn is kopf_spawn._spawn_without_pause


def test_a_changed_spawn_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    async def someone_elses(self: object, coro: object, *, name: str | None = None) -> None:
        raise AssertionError("not called")

    monkeypatch.setattr(aiotasks.Scheduler, "spawn", someone_elses)
    assert not spawn_workers_without_pause()
    assert aiotasks.Scheduler.spawn is someone_elses


async def test_spawning_takes_no_turn_of_the_loop_and_the_workers_run() -> None:
    spawn_workers_without_pause()
    scheduler = aiotasks.Scheduler(limit=2)
    done: list[int] = []
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    async def work(i: int) -> None:
        await asyncio.sleep(0.01)
        done.append(i)

    counter = asyncio.create_task(count_turns())
    await asyncio.sleep(0)
    before = turns
    for i in range(5):
        await scheduler.spawn(work(i), name=f"work {i}")
    assert turns == before  # kopf's spawn gave the loop a turn each time
    await scheduler.wait()
    assert sorted(done) == list(range(5))
    await scheduler.close()
    counter.cancel()
    with pytest.raises(RuntimeError, match="closed"):
        await scheduler.spawn(work(9))
    assert 9 not in done
