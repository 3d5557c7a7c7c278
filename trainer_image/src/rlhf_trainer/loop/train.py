"""The online train function (`rlhf_trainer.runner` dispatches PPO, GRPO, REINFORCE++, RLOO,
Dr. GRPO, on-policy distillation here): resolve the models, prompts, reward sources and
agent, start the cluster, and run the driver loop. The runner owns directories, errors, exit
codes and teardown.

`train_rollouts` is the same for any loop over rollouts with its own cluster and driver
classes (the iterative trainers use it too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from rlhf_trainer.context.job import (
    JobError,
    RunContext,
    RunResult,
    fit,
    resolve_path,
    total_steps,
)
from rlhf_trainer.context.preemption import Preempted

from .cluster import OnlineCluster
from .distill import tokenizer_problem

if TYPE_CHECKING:
    from .driver import Trainer


def train_online(ctx: RunContext) -> RunResult:
    from rlhf_trainer.distributed.cluster import TrainingCluster
    from rlhf_trainer.distributed.strategy import total_optimizer_steps

    from .driver import Trainer

    t, r = ctx.cfg.training, ctx.cfg.rollout

    def optimizer_steps(steps: int) -> int:
        samples = t.rollout_batch_size * r.samples_per_prompt
        return total_optimizer_steps(steps, samples, t.train_batch_size, t.ppo_epochs)

    return train_rollouts(ctx, TrainingCluster, Trainer, optimizer_steps)


def train_rollouts(
    ctx: RunContext,
    cluster_cls: Callable[..., OnlineCluster],
    trainer_cls: Callable[..., Trainer[Any]],
    optimizer_steps: Callable[[int], int],
) -> RunResult:
    """Models, prompts, reward sources and agent of the job, then `cluster_cls` (a
    `TrainingCluster`) and `trainer_cls` (a `Trainer`) run to the end. `optimizer_steps`:
    the run's optimiser steps (the LR schedule's length) for its number of steps."""
    from rlhf_trainer.data.pretrain import PretrainBatches, load_pretrain
    from rlhf_trainer.data.prompts import load_prompts
    from rlhf_trainer.distributed.cluster import ModelDirs
    from rlhf_trainer.distributed.ray_session import shutdown_ray
    from rlhf_trainer.models.loading import (
        LoadOptions,
        load_tokenizer,
        model_cache_dir,
        resolve_model_dir,
    )
    from rlhf_trainer.models.tiny import ModelKind
    from rlhf_trainer.rewards.agent_runner import ConfinedAgents

    from .driver import Hooks
    from .hooks import open_scorer

    cfg, base = ctx.cfg, ctx.base_dir
    torch.manual_seed(cfg.training.seed)
    models, cache = cfg.models, model_cache_dir()
    actor_dir = resolve_model_dir(models.actor, cache, "causal-lm", base)
    critic_dir = None
    if cfg.algorithm.name.needs_critic:
        kind: ModelKind = (
            "reward" if models.critic is None and models.reward_models else "causal-lm"
        )
        critic_dir = resolve_model_dir(models.resolved_critic(), cache, kind, base)
    reference_dir = resolve_model_dir(models.resolved_reference(), cache, "causal-lm", base)
    teacher_dir = None
    if models.teacher is not None and cfg.algorithm.name.is_online:
        teacher_dir = resolve_model_dir(models.teacher, cache, "causal-lm", base)
    # A process reward model is a causal LM read at its step tokens; the others score sequences.
    reward_dirs = tuple(
        resolve_model_dir(rm, cache, "causal-lm" if rm.process else "reward", base)
        for rm in models.reward_models
    )
    agents = None
    agent = cfg.rollout.agent
    if agent is not None and agent.path is not None:
        agents = ConfinedAgents(
            resolve_path(agent.path, base, "rollout.agent.path"),
            timeout_seconds=agent.timeout_seconds,
            limits=agent.limits,
            on_error=agent.on_error,
        )
        ctx.on_close(agents.close)
        agents.start()  # a file that does not load fails here, before any model loads

    tokenizer = load_tokenizer(actor_dir, LoadOptions.of(models.actor))
    if teacher_dir is not None and models.teacher is not None:
        teacher_tokenizer = load_tokenizer(teacher_dir, LoadOptions.of(models.teacher))
        problem = tokenizer_problem(tokenizer.get_vocab(), teacher_tokenizer.get_vocab())
        if problem is not None:
            raise JobError(problem)
    prompts = load_prompts(cfg.data, tokenizer, base, cfg.training.seed)
    eval_prompts = []
    if cfg.data.eval:
        eval_set = load_prompts(cfg.data, tokenizer, base, cfg.training.seed, which="eval")
        eval_prompts = [eval_set[i] for i in range(len(eval_set))]
    steps = total_steps(cfg, len(prompts))
    scorer = open_scorer(cfg, base)
    ctx.on_close(scorer.close)
    scorer.start()
    checkpoints = ctx.checkpoints()
    reporter = ctx.reporter()
    if ctx.stop():  # stopped while loading: nothing to save, and no cluster to start
        raise Preempted(0)
    ctx.on_close(shutdown_ray)
    cluster = cluster_cls(
        cfg,
        ModelDirs(actor_dir, critic_dir, reference_dir, reward_dirs, teacher_dir),
        total_optimizer_steps=optimizer_steps(steps),
    )
    ctx.on_close(cluster.shutdown)
    pretrain = None
    if cfg.algorithm.ptx_coef > 0:
        # One pretraining row per experience row and PPO epoch (OpenRLHF's PPO-ptx).
        samples = cfg.training.rollout_batch_size * cfg.rollout.samples_per_prompt
        pretrain = PretrainBatches(
            load_pretrain(cfg.data, tokenizer, base, cfg.training.seed),
            samples * cfg.training.ppo_epochs,
            int(tokenizer.pad_token_id),
        )
    hooks = Hooks(scorer, checkpoints, reporter, agents, pretrain)
    trainer = trainer_cls(
        cfg,
        cluster,
        tokenizer,
        prompts,
        hooks,
        total_steps=steps,
        export_dir=ctx.dirs.final,
        stop=ctx.stop,
        eval_prompts=eval_prompts,
    )
    return fit(ctx, trainer, checkpoints)
