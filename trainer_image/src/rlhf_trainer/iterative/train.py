"""The iterative train function (`rlhf_trainer.runner` dispatches rejection sampling and
iterative DPO here): the online loop's models, prompts, reward sources and cluster, with the
iterative cluster and driver. The runner owns directories, errors, exit codes and teardown.

Outputs are the online loop's: `metrics.jsonl` (one record per round), `tensorboard/`,
`checkpoints/step-N/` and `final/actor`, the trained policy in HF format.
"""

from __future__ import annotations

from rlhf_trainer.config import JobConfig
from rlhf_trainer.context.job import RunContext, RunResult

from .selection import max_optimizer_steps, max_round_items


def schedule_length(cfg: JobConfig, rounds: int) -> int:
    """Optimiser steps for the LR schedule: the most the rounds can take (a round selects at
    most one item per prompt, or every sample with a reward threshold)."""
    t = cfg.training
    items = max_round_items(
        t.rollout_batch_size,
        cfg.rollout.samples_per_prompt,
        every_sample=cfg.algorithm.reward_threshold is not None,
    )
    return max_optimizer_steps(rounds, items, epochs=t.epochs, batch_size=t.train_batch_size)


def train_iterative(ctx: RunContext) -> RunResult:
    from rlhf_trainer.distributed.iterative import IterativeCluster
    from rlhf_trainer.loop.train import train_rollouts

    from .driver import IterativeTrainer

    return train_rollouts(
        ctx, IterativeCluster, IterativeTrainer, lambda rounds: schedule_length(ctx.cfg, rounds)
    )
