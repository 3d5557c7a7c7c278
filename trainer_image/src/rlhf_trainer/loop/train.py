"""The online train function (`rlhf_trainer.runner` dispatches PPO, GRPO, REINFORCE++, RLOO,
Dr. GRPO here): resolve the models, prompts, reward sources and agent, start the cluster, and
run the driver loop. The runner owns directories, errors, exit codes and teardown.
"""

from __future__ import annotations

import torch

from rlhf_trainer.runner.job import RunContext, RunResult, fit, resolve_path, total_steps
from rlhf_trainer.runner.preemption import Preempted


def train_online(ctx: RunContext) -> RunResult:
    from rlhf_trainer.data.prompts import load_prompts
    from rlhf_trainer.distributed.cluster import ModelDirs, TrainingCluster, shutdown_ray
    from rlhf_trainer.distributed.strategy import total_optimizer_steps
    from rlhf_trainer.models.loading import load_tokenizer, model_cache_dir, resolve_model_dir
    from rlhf_trainer.models.tiny import ModelKind

    from .driver import Hooks, Trainer
    from .hooks import open_scorer
    from .rollout import load_agent_class

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
    reward_dirs = tuple(resolve_model_dir(rm, cache, "reward", base) for rm in models.reward_models)
    agent_cls = None
    agent = cfg.rollout.agent
    if agent is not None and agent.path is not None:
        agent_cls = load_agent_class(resolve_path(agent.path, base, "rollout.agent.path"))

    tokenizer = load_tokenizer(actor_dir)
    prompts = load_prompts(cfg.data, tokenizer, base, cfg.training.seed)
    steps = total_steps(cfg, len(prompts))
    samples = cfg.training.rollout_batch_size * cfg.rollout.samples_per_prompt
    optimizer_steps = total_optimizer_steps(
        steps, samples, cfg.training.train_batch_size, cfg.training.ppo_epochs
    )
    scorer = open_scorer(cfg, base)
    ctx.on_close(scorer.close)
    scorer.start()
    checkpoints = ctx.checkpoints()
    reporter = ctx.reporter()
    if ctx.stop():  # stopped while loading: nothing to save, and no cluster to start
        raise Preempted(0)
    ctx.on_close(shutdown_ray)
    cluster = TrainingCluster(
        cfg,
        ModelDirs(actor_dir, critic_dir, reference_dir, reward_dirs),
        total_optimizer_steps=optimizer_steps,
    )
    ctx.on_close(cluster.shutdown)
    hooks = Hooks(scorer, checkpoints, reporter, agent_cls)
    trainer = Trainer(
        cfg,
        cluster,
        tokenizer,
        prompts,
        hooks,
        total_steps=steps,
        export_dir=ctx.dirs.final,
        stop=ctx.stop,
    )
    return fit(ctx, trainer, checkpoints)
