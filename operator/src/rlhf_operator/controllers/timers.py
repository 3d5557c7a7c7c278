"""When work is done again: timers that run a pass later (one per key, a later request
replaces an earlier one, each firing as a task of the running loop), and the one retry policy
for whatever failed (`Backoff`). kopf itself retries nothing of ours."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from ..settings import OperatorSettings

# A timer asked for `delay` seconds from a deadline computed a moment before is due a few
# microseconds off that deadline: within this, it is the same timer.
_SAME_TIMER_SECONDS = 0.05


class Requeue:
    """A timer per key. A request never postpones a timer due sooner (a level-based pass
    that comes early is harmless, one that never comes is not). With `coalesce`, a timer
    that fires while the key's earlier pass waits to start adds no pass of its own: that
    one, not started yet, will see what this one would (its owner calls `started` once it
    reads what it acts on; events after that get a pass of their own)."""

    def __init__(
        self, run: Callable[[Any], Coroutine[Any, Any, None]], *, coalesce: bool = False
    ) -> None:
        self._run = run
        self._coalesce = coalesce
        self._timers: dict[Any, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting: set[Any] = set()  # keys whose pass is queued, not started

    def schedule(self, key: Any, delay: float) -> None:
        """Run `key` after `delay` seconds, unless its timer is due sooner."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay)
        timer = self._timers.get(key)
        if timer is not None and timer.when() <= when:
            return
        self.cancel(key)
        self._timers[key] = loop.call_at(
            when, self._fire, key, context=_without_cause(contextvars.copy_context())
        )

    def cancel(self, key: Any) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def cancel_due(self, key: Any, when: float) -> None:
        """Cancel the key's timer if it is the one asked for at `when` (loop time, which is
        time.monotonic()): one asked for since, due sooner, stays."""
        timer = self._timers.get(key)
        if timer is not None and abs(timer.when() - when) < _SAME_TIMER_SECONDS:
            self.cancel(key)

    def started(self, key: Any) -> None:
        """The key's queued pass has started: a new event needs a pass of its own."""
        self._waiting.discard(key)

    def _fire(self, key: Any) -> None:
        self._timers.pop(key, None)
        if self._coalesce:
            if key in self._waiting:
                return
            self._waiting.add(key)
        task = asyncio.get_running_loop().create_task(self._run(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._coalesce:  # also when the pass ended before it started (a bug, a deletion)
            task.add_done_callback(lambda _: self._waiting.discard(key))

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


# kopf runs each handler with the cause in a context variable: the object's body and the raw
# watch event behind it (a whole RayJob, pod templates and all, when a RayJob event ran the
# pass). A timer keeps the context it was made in until it fires (hours for a deadline or a
# TTL): ~60 KB a job, for a value the timer's pass never reads.
_CAUSE_VARS = frozenset({"cause_var"})


def _without_cause(context: contextvars.Context) -> contextvars.Context:
    """`context` without kopf's handler cause; what a pass needs of it (kopf's event queue,
    its settings) stays."""
    if not any(var.name in _CAUSE_VARS for var in context):
        return context
    clean = contextvars.Context()
    for var, value in context.items():
        if var.name not in _CAUSE_VARS:
            clean.run(var.set, value)
    return clean


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


class PassSlots:
    """At most `limit` passes at work at once (an asyncio.Semaphore), and of those waiting,
    the urgent ones first (then first come, first served): a new job's first pass makes its
    children and RayJob, which its users wait for; any other pass brings a status up to date,
    which can wait for the seconds a burst of new jobs takes. Not longer: a pass gives way
    to at most `give_way` urgent ones, then goes before the rest of them (its job's parse,
    kept for `give_way` passes or so, would be gone, and a 5,000-job burst's statuses would
    all wait for its end)."""

    def __init__(
        self,
        limit: int,
        *,
        give_way: int = 1 << 62,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self._limit = limit
        self._free = limit
        self._give_way = give_way
        self._on_idle = on_idle  # called when the last pass at work ends and none waits
        self._urgent: collections.deque[asyncio.Future[None]] = collections.deque()
        # Each with the count of urgent passes let go before it queued.
        self._others: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._urgent_let_go = 0

    @property
    def idle(self) -> bool:
        """No pass at work, none waiting."""
        return self._free == self._limit and not self._urgent and not self._others

    @contextlib.asynccontextmanager
    async def slot(self, *, urgent: bool) -> AsyncIterator[None]:
        await self._acquire(urgent)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, urgent: bool) -> None:
        if self._free > 0 and not self._urgent and not self._others:
            self._free -= 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if urgent:
            self._urgent.append(turn)
        else:
            self._others.append((self._urgent_let_go, turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # given the slot as it was cancelled: pass it on
            raise  # a cancelled turn still queued is skipped by _release

    def _next(self) -> asyncio.Future[None] | None:
        while self._urgent or self._others:
            overdue = bool(self._others) and (
                self._urgent_let_go - self._others[0][0] >= self._give_way
            )
            if self._urgent and not overdue:
                turn = self._urgent.popleft()
                if not turn.done():
                    self._urgent_let_go += 1
                    return turn
            else:
                _, turn = self._others.popleft()
                if not turn.done():
                    return turn
        return None

    def _release(self) -> None:
        turn = self._next()
        if turn is not None:
            turn.set_result(None)
            return
        self._free += 1
        if self._on_idle is not None and self._free == self._limit:
            self._on_idle()
