"""The report every sink receives, and the sink interface."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

# Metric names shown first on the console and used for the status' `reward` field.
REWARD_KEY = "reward"
KL_KEY = "kl"


@dataclass(frozen=True)
class StepReport:
    step: int
    total_steps: int
    metrics: dict[str, float]
    timings: dict[str, float]
    samples: int  # samples (responses) trained on this step; 0 when not known
    samples_per_second: float | None
    eta_seconds: float | None
    examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_final(self) -> bool:
        return self.step >= self.total_steps

    @property
    def reward(self) -> float | None:
        return self.metrics.get(REWARD_KEY)


class Sink(Protocol):
    def write_step(self, report: StepReport) -> None: ...

    def write_checkpoint(self, step: int, path: Path) -> None: ...

    def close(self) -> None: ...


def finite_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Numbers only, as floats; NaN/inf and non-numbers dropped (JSON and the API reject them)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool):
            value = float(value)
        if hasattr(value, "item") and callable(value.item):  # 0-d tensors and numpy scalars
            value = value.item()
        if isinstance(value, int | float) and math.isfinite(value):
            out[str(key)] = float(value)
    return out


def split_samples(samples: int | Sequence[Mapping[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """`on_step`'s `samples`: a count, or (as the driver may pass) example dicts to log."""
    if isinstance(samples, int):
        return samples, []
    return 0, [dict(s) for s in samples]
