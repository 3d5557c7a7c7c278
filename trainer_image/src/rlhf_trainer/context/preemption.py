"""SIGTERM as a request to stop at the next step boundary, not a crash.

Kubernetes stops a pod (node drain, Kueue eviction, spot reclaim) with SIGTERM, then SIGKILL
after `terminationGracePeriodSeconds` (which the operator sets from
`runPolicy.checkpointOnPreemptionSeconds`). While `StopOnSignal` is active, SIGTERM only sets a
flag; the driver loops check it between steps (and before a step's update, to abandon a step
that has not changed any weights yet), raise `Preempted`, and their usual failure path writes a
checkpoint of the last finished step. A half-finished step is dropped whole: its samples, its
advantages and its data position never reach a checkpoint, so a resume redoes it from scratch.

A flag and not an exception from the handler: the signal may land anywhere (inside a Ray call,
a DeepSpeed step, a checkpoint write), and only the loop knows where stopping is safe.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

# What a driver loop asks between steps: should it stop now?
StopCheck = Callable[[], bool]


def never() -> bool:
    """The `StopCheck` of a loop nobody stops (tests, benchmarks)."""
    return False


class Preempted(Exception):
    """A driver loop stopped at a step boundary because a stop was requested (SIGTERM)."""

    def __init__(self, completed_steps: int) -> None:
        super().__init__(f"stopped by SIGTERM after {completed_steps} completed steps")
        self.completed_steps = completed_steps


class StopOnSignal:
    """`with StopOnSignal() as stop:` ... `stop()` is True once SIGTERM arrived.

    A second SIGTERM is not caught (the handler steps aside after the first): whoever sends it
    again wants the process gone now. Installs nothing off the main thread, where Python
    cannot set signal handlers; `stop()` then stays False.
    """

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        self.signum = signum
        self._event = threading.Event()
        self._previous: Any = None
        self._installed = False

    def __call__(self) -> bool:
        return self._event.is_set()

    def request(self) -> None:
        """Ask for a stop as SIGTERM would (tests, or a caller with its own reason)."""
        self._event.set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._event.set()
        signal.signal(signum, signal.SIG_DFL)

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(self.signum, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            # None: the previous handler was not set from Python; the default is the best guess.
            previous = signal.SIG_DFL if self._previous is None else self._previous
            signal.signal(self.signum, previous)
            self._installed = False
