"""Rules of partial rollout (`rollout.partialRollout`, with `rollout.async`): the engines
pause their requests in flight around each weight update and resume them by the new weights
(see `rlhf_trainer.distributed.vllm_pausable`). Pure; `rules` runs them with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Problem

if TYPE_CHECKING:
    from .job import JobConfig

FIELD = "rollout.partialRollout"


def partial_rollout_problems(cfg: JobConfig) -> list[Problem]:
    """Given `rollout.async: true` (the async rules say when it is off)."""
    if not cfg.rollout.partial_rollout:
        return []
    out: list[Problem] = []
    if cfg.training.deterministic:
        out.append(
            Problem(
                FIELD,
                "where a weight update lands in a batch in flight depends on timing, so two "
                "runs sample different batches; training.deterministic needs the same batches "
                "run after run: set partialRollout false (async rollout alone stays exact)",
            )
        )
    if cfg.rollout.tensor_parallel_size > 1:
        out.append(
            Problem(
                FIELD,
                "pausable engines (vLLM's AsyncLLM) run one rank per engine in this trainer; "
                f"got rollout.tensorParallelSize {cfg.rollout.tensor_parallel_size}: set it to "
                "1 or partialRollout false",
            )
        )
    return out
