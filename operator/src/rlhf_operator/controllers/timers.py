"""When work is done again: timers that run a pass later (one per key, a later request
replaces an earlier one, each firing as a task of the running loop), and the one retry policy
for whatever failed (`Backoff`). kopf itself retries nothing of ours."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from ..settings import OperatorSettings


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


class Backoff:
    """The operator's one retry policy: after a failure, try again in `api_retry_seconds`,
    twice as long after each further failure in a row, at most `retry_max_seconds`; a success
    starts over. Keyed by what failed: a job's pass, or one child the API server refused."""

    def __init__(self, settings: OperatorSettings) -> None:
        self._settings = settings
        self._failures: dict[Any, int] = {}

    def failed(self, key: Any) -> tuple[int, float]:
        """Count a failure: (failures in a row, seconds until the next try)."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        return failures, self._settings.retry_delay(failures)

    def succeeded(self, key: Any) -> None:
        self._failures.pop(key, None)

    def forget(self, matches: Callable[[Any], bool]) -> None:
        for key in [k for k in self._failures if matches(k)]:
            del self._failures[key]
