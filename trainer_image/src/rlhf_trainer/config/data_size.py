"""How many steps a job's data gives, and the data's size where the spec alone tells it.

The trainer counts its steps from the rows it loaded (`context.job.total_steps`); the rules
count them before anything runs when every training source is a builtin data set, whose size
is known, so a batch larger than the data is refused before any device is taken. Both say it
in the same words (`too_little_data`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .base import Problem
from .builtins import builtin_row_count

if TYPE_CHECKING:
    from .job import JobConfig


@dataclass(frozen=True)
class StepBasis:
    """Steps = items x passes // batch: online, prompts x numEpisodes / rolloutBatchSize;
    offline, samples x epochs / trainBatchSize."""

    passes: int
    passes_field: str
    batch: int
    batch_field: str
    items: str

    def steps(self, items: int) -> int:
        return items * self.passes // self.batch  # a last partial batch is dropped


def fixed_steps(cfg: JobConfig) -> int | None:
    """Steps the spec fixes whatever the data: `training.maxSteps`, else the
    `algorithm.iterations` rounds of an iterative algorithm; None when the data sets them."""
    if cfg.training.max_steps is not None:
        return cfg.training.max_steps
    if cfg.algorithm.name.is_iterative and cfg.algorithm.iterations is not None:
        return cfg.algorithm.iterations
    return None


def step_basis(cfg: JobConfig) -> StepBasis:
    """How the data sets the step count (where `fixed_steps` does not)."""
    t = cfg.training
    if cfg.algorithm.name.is_online:
        return StepBasis(
            t.num_episodes, "numEpisodes", t.rollout_batch_size, "rolloutBatchSize", "prompts"
        )
    return StepBasis(t.epochs, "epochs", t.train_batch_size, "trainBatchSize", "samples")


def too_little_data(basis: StepBasis, items: int) -> Problem | None:
    """Not one full step in the data: the batch field, and how to fix it."""
    if basis.steps(items) >= 1:
        return None
    return Problem(
        f"training.{basis.batch_field}",
        f"{basis.batch} is larger than the data ({items} {basis.items} x {basis.passes} "
        f"{basis.passes_field}): not one full step; lower it or add data",
    )


def mixed_counts(sizes: Sequence[int], probabilities: Sequence[float]) -> list[int]:
    """Rows each source gives a mixture of several: `round(p_i x total)`, total the rows of
    all sources together (a small source with a large probability repeats)."""
    if len(sizes) == 1:
        return list(sizes)
    total = sum(sizes)
    return [round(p * total) for p in probabilities]


def known_train_rows(cfg: JobConfig) -> int | None:
    """Rows of `data.train` when every source is a builtin data set of known size (capped
    at `data.maxSamples` per source, then mixed), else None."""
    sizes = []
    for source in cfg.data.train:
        rows = builtin_row_count(source.builtin, source.split) if source.builtin else None
        if rows is None:
            return None
        cap = cfg.data.max_samples
        sizes.append(rows if cap is None else min(rows, cap))
    return sum(mixed_counts(sizes, [s.probability for s in cfg.data.train]))
