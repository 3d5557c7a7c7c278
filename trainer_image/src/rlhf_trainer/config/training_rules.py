"""Rules of batch sizes, the optimizer and resuming: pure checks; `rules.job_problems` runs
them with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Problem
from .checkpoint import ResumePolicy

if TYPE_CHECKING:
    from .job import JobConfig


def batch_problems(cfg: JobConfig) -> list[Problem]:
    t, p = cfg.training, cfg.placement
    out: list[Problem] = []
    roles = [("actorGpus", p.actor_gpus)]
    if cfg.algorithm.name.needs_critic:
        roles.append(("criticGpus", p.critic_gpus))
    for field, ranks in roles:
        unit = t.micro_train_batch_size * ranks
        if t.train_batch_size % unit:
            out.append(
                Problem(
                    "training.trainBatchSize",
                    f"must be divisible by microTrainBatchSize x placement.{field} "
                    f"({t.micro_train_batch_size} x {ranks} = {unit}); got {t.train_batch_size}",
                )
            )
    # An iterative round trains on however many samples it selected (see rlhf_trainer.iterative).
    if cfg.algorithm.name.is_online and not cfg.algorithm.name.is_iterative:
        samples = t.rollout_batch_size * cfg.rollout.samples_per_prompt
        if samples % t.train_batch_size:
            out.append(
                Problem(
                    "training.trainBatchSize",
                    f"must divide rolloutBatchSize x rollout.samplesPerPrompt "
                    f"({t.rollout_batch_size} x {cfg.rollout.samples_per_prompt} = {samples}); "
                    f"got {t.train_batch_size}",
                )
            )
    return out


def training_problems(cfg: JobConfig) -> list[Problem]:
    t = cfg.training
    if t.adam_offload and t.zero_stage == 0:
        return [
            Problem(
                "training.adamOffload",
                "DeepSpeed offloads optimizer states only with ZeRO: set training.zeroStage >= 1",
            )
        ]
    return []


def resume_problems(cfg: JobConfig) -> list[Problem]:
    c = cfg.checkpoint
    if c.resume_from is not None and c.resume is ResumePolicy.NEVER:
        return [
            Problem(
                "checkpoint.resumeFrom",
                f"names a checkpoint to resume from ({c.resume_from!r}) but checkpoint.resume "
                "is never: remove one of them",
            )
        ]
    return []
