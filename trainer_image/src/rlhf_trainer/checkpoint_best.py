"""`checkpoint.keepBest`: which checkpoints a rotation keeps when the best-scoring one must
stay besides the newest `keep`. Pure (no torch, no files): `checkpoint_store` applies it.

Each checkpoint may carry a score (the metric's value at its step, recorded in its manifest
with the metric's name). The best is the finite score that is highest (`mode: max`) or lowest
(`min`); a tie keeps the earlier checkpoint, so a later one must do strictly better to take its
place (as Keras' ModelCheckpoint and HF Trainer's best-model tracking do). A score recorded
for another metric (the spec changed between attempts) does not count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlhf_trainer.config import BestMode, KeepBest


@dataclass(frozen=True)
class Score:
    """A checkpoint's score: `value` of `metric` at its step."""

    metric: str
    value: float

    def to_json(self) -> dict[str, object]:
        return {"metric": self.metric, "value": self.value}

    @classmethod
    def parse(cls, data: object) -> Score | None:
        """The score a manifest recorded; None when it recorded none (or nothing usable)."""
        if not isinstance(data, dict):
            return None
        metric, value = data.get("metric"), data.get("value")
        if not isinstance(metric, str) or not isinstance(value, int | float):
            return None
        return cls(metric, float(value))


@dataclass(frozen=True)
class BestCheckpoint:
    """The best-scoring complete checkpoint of a directory."""

    step: int
    path: Path
    metric: str
    score: float


@dataclass(frozen=True)
class Candidate:
    """A complete checkpoint as rotation sees it, in publish order."""

    step: int
    score: Score | None


def best_index(checkpoints: Sequence[Candidate], keep_best: KeepBest | None) -> int | None:
    """The index of the best-scoring checkpoint (None: no rule, or none scored on its
    metric); ties go to the one published first."""
    if keep_best is None:
        return None
    best: int | None = None
    for i, c in enumerate(checkpoints):
        if c.score is None or c.score.metric != keep_best.metric:
            continue
        if not math.isfinite(c.score.value):
            continue
        if best is None or _better(c.score.value, _value(checkpoints[best]), keep_best.mode):
            best = i
    return best


def to_remove(checkpoints: Sequence[Candidate], keep: int, keep_best: KeepBest | None) -> list[int]:
    """Indexes (oldest first) of the checkpoints a rotation deletes: all but the newest `keep`
    and, with `keep_best`, the best-scoring one."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1 (checkpoint.keep); got {keep}")
    best = best_index(checkpoints, keep_best)
    return [i for i in range(max(0, len(checkpoints) - keep)) if i != best]


def _value(candidate: Candidate) -> float:
    return candidate.score.value if candidate.score is not None else math.nan


def _better(value: float, than: float, mode: BestMode) -> bool:
    return value > than if mode is BestMode.MAX else value < than
