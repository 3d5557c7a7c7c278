"""The offline train function (`rlhf_trainer.runner` dispatches SFT, conditional SFT, reward
model, DPO, IPO, cDPO, KTO, distillation and PRM here): resolve the models and the data set, place
the ranks, and run the loop. The runner owns directories, errors, exit codes and teardown.

Outputs under the run directory: `metrics.jsonl`, `tensorboard/`, `checkpoints/step-N/`
(unless `checkpoint.dir` says otherwise) and `final/`, the trained model in HF format.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from rlhf_trainer.config import AlgorithmName, JobConfig
from rlhf_trainer.context.job import RunContext, RunResult, fit, total_steps
from rlhf_trainer.context.preemption import Preempted
from rlhf_trainer.objectives.kinds import OfflineSpec, TrainerKind, offline_spec


def load_dataset(spec: OfflineSpec, cfg: JobConfig, tokenizer: Any, base_dir: Path) -> Any:
    from rlhf_trainer.data.offline import (
        load_conditional_sft,
        load_kto,
        load_preferences,
        load_prm,
        load_sft,
    )

    if spec.algorithm is AlgorithmName.CONDITIONAL_SFT:
        return load_conditional_sft(cfg.data, tokenizer, base_dir, cfg.training.seed)
    if spec.kind is TrainerKind.PRM:
        return load_prm(cfg.data, tokenizer, base_dir, cfg.training.seed, cfg.algorithm.prm)
    loader = {
        TrainerKind.SFT: load_sft,
        TrainerKind.DISTILLATION: load_sft,
        TrainerKind.REWARD_MODEL: load_preferences,
        TrainerKind.PREFERENCE: load_preferences,
        TrainerKind.KTO: load_kto,
    }[spec.kind]
    return loader(cfg.data, tokenizer, base_dir, cfg.training.seed)


def train_offline(ctx: RunContext) -> RunResult:
    import torch

    from rlhf_trainer.distributed.offline import FrozenDirs, OfflineCluster
    from rlhf_trainer.distributed.ray_session import shutdown_ray
    from rlhf_trainer.models.loading import (
        LoadOptions,
        load_tokenizer,
        model_cache_dir,
        resolve_model_dir,
    )
    from rlhf_trainer.objectives.collate import collate

    from .driver import OfflineTrainer

    cfg, base = ctx.cfg, ctx.base_dir
    spec = offline_spec(cfg)
    torch.manual_seed(cfg.training.seed)
    cache = model_cache_dir()
    model_dir = resolve_model_dir(cfg.models.actor, cache, spec.model_kind, base)
    reference_dir = None
    if spec.needs_reference:
        reference_dir = resolve_model_dir(cfg.models.resolved_reference(), cache, "causal-lm", base)
    teacher_dir = None
    if spec.needs_teacher and cfg.models.teacher is not None:
        teacher_dir = resolve_model_dir(cfg.models.teacher, cache, "causal-lm", base)
    tokenizer = load_tokenizer(model_dir, LoadOptions.of(cfg.models.actor))
    dataset = load_dataset(spec, cfg, tokenizer, base)
    steps = total_steps(cfg, len(dataset))
    collate_fn = partial(
        collate, spec=spec, pad_id=int(tokenizer.pad_token_id), max_length=cfg.data.max_length
    )
    checkpoints = ctx.checkpoints()
    reporter = ctx.reporter()
    if ctx.stop():  # stopped while loading: nothing to save, and no cluster to start
        raise Preempted(0)
    ctx.on_close(shutdown_ray)
    frozen = FrozenDirs(reference=reference_dir, teacher=teacher_dir)
    cluster = OfflineCluster(cfg, model_dir, frozen, total_optimizer_steps=steps)
    ctx.on_close(cluster.shutdown)
    trainer = OfflineTrainer(
        cfg,
        cluster,
        dataset,
        collate_fn,
        checkpoints=checkpoints,
        reporter=reporter,
        total_steps=steps,
        export_dir=ctx.dirs.final,
        tokenizer_dir=model_dir,
        stop=ctx.stop,
    )
    return fit(ctx, trainer, checkpoints)
