"""kopf's watchers read their streams without a turn of the event loop per new object.

kopf multiplexes each watch stream into one worker per object; its `Scheduler.spawn`, which
starts a new object's worker, ends in `await asyncio.sleep(0)`, there (its comment says) for
kopf's own tests. A watcher thus takes in one new object per turn of the event loop, and in a
burst of new RLHFJobs a turn holds every pass, request and event already under way: the
500th job's ADDED event, in the operator's socket 0.2 s after the burst was created, reached
kopf's processing 4.3 s later, behind the passes and status writes of the jobs before it
(`bench/operator_scale.py --burst 500`). Without the pause the watcher takes in all it has
read; the new jobs' first passes queue for `PassSlots`, which lets them go before the status
passes of jobs already made (each of those for at most 256 of them), and the events are still
processed in the order they came.

`spawn` is replaced by the same steps less the pause, where kopf's is what this module was
written against (`_KOPF_SPAWN`); any other kopf keeps its own (a test fails on such an
upgrade, and the operator logs it). kopf is pinned.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Coroutine
from typing import Any

from kopf._cogs.aiokits import aiotasks

logger = logging.getLogger(__name__)

# sha256 of kopf 1.45.2's `Scheduler.spawn` source.
_KOPF_SPAWN = "2e4ebde4b3be019645a3f047806eb6c7363b0fcfa4a38b138e8d80393c95a632"


def _source_digest(function: Any) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


async def _spawn_without_pause(
    self: aiotasks.Scheduler, coro: Coroutine[Any, Any, Any], *, name: str | None = None
) -> None:
    """kopf's `Scheduler.spawn` (1.45.2) without its closing `asyncio.sleep(0)`."""
    if self._closed:
        await aiotasks.cancel_coro(coro=coro, name=name)
        raise RuntimeError("Cannot add new coroutines to a closed and inactive scheduler.")
    async with self._condition:
        await self._pending_coros.put(aiotasks.SchedulerJob(coro=coro, name=name))
        self._condition.notify_all()  # -> the scheduler's spawner task


def spawn_workers_without_pause() -> bool:
    """Installs the spawn without a pause (idempotent); False where kopf's `spawn` is not the
    one this was written against."""
    current = aiotasks.Scheduler.spawn
    if current is _spawn_without_pause:
        return True
    if _source_digest(current) != _KOPF_SPAWN:
        logger.warning("kopf's Scheduler.spawn changed: its watchers keep their pause")
        return False
    aiotasks.Scheduler.spawn = _spawn_without_pause  # type: ignore[method-assign]
    return True
