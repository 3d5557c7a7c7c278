"""Per-step timing by stage, as in the OpenRLHF paper's per-stage table (generation, vLLM weight
sync, log-probs/values/rewards, training, total), and the run's progress (throughput, ETA)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# The paper's stages, in its order; other names may be timed as well (e.g. "checkpoint").
STAGES = ("generation", "weight_sync", "make_experience", "training")


class StageTimer:
    """Accumulates seconds per stage within one step; `total` is the step's wall time.

    timer = StageTimer()
    with timer("generation"): ...
    with timer("training"): ...
    timings = timer.timings()   # {"generation": s, "training": s, ..., "total": s}
    timer.reset()               # next step
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.seconds: dict[str, float] = {}
        self._start = clock()

    def reset(self) -> None:
        self.seconds = {}
        self._start = self._clock()

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        if stage == "total":
            raise ValueError("'total' is the whole step's time; time a named stage instead")
        start = self._clock()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + self._clock() - start

    def timings(self) -> dict[str, float]:
        """Every paper stage (0.0 when not run this step), other stages timed, and total."""
        out = {stage: self.seconds.get(stage, 0.0) for stage in STAGES}
        out |= {k: v for k, v in self.seconds.items() if k not in out}
        out["total"] = self._clock() - self._start
        return out


class Progress:
    """Throughput and ETA from the recent steps' durations (a window, so warm-up steps and
    a resumed run's first step do not dominate)."""

    def __init__(self, window: int = 10, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._durations: deque[float] = deque(maxlen=window)
        self._last: float | None = None

    def step_done(self, step_seconds: float | None = None) -> float:
        """Record a finished step (its duration, else the time since the previous call)."""
        now = self._clock()
        if step_seconds is None:
            step_seconds = 0.0 if self._last is None else now - self._last
        self._last = now
        if step_seconds > 0:
            self._durations.append(step_seconds)
        return step_seconds

    @property
    def seconds_per_step(self) -> float | None:
        if not self._durations:
            return None
        return sum(self._durations) / len(self._durations)

    def eta_seconds(self, step: int, total_steps: int) -> float | None:
        per_step = self.seconds_per_step
        if per_step is None:
            return None
        return max(0, total_steps - step) * per_step


def format_duration(seconds: float | None) -> str:
    """`1h02m`, `3m05s`, `42s`; `?` when unknown."""
    if seconds is None:
        return "?"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"
