"""Timers that run a pass again later: one per key (a later request replaces an earlier one),
each firing as a task of the running loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class Requeue:
    def __init__(self, run: Callable[[Any], Coroutine[Any, Any, None]]) -> None:
        self._run = run
        self._timers: dict[Any, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def schedule(self, key: Any, delay: float) -> None:
        """Run `key` again after `delay` seconds (replaces an earlier timer)."""
        self.cancel(key)
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(max(0.0, delay), self._fire, key)

    def cancel(self, key: Any) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _fire(self, key: Any) -> None:
        self._timers.pop(key, None)
        task = asyncio.get_running_loop().create_task(self._run(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
