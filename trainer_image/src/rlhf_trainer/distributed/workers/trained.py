"""Shared by the trained roles (actor, critic, the offline trainers' model): loading into a
DeepSpeed engine, PPO epochs, checkpoints.

A `train` call gets this rank's shard of the step's experience and runs `ppoEpochs` passes
over it in shuffled micro-batches; DeepSpeed accumulates gradients until `trainBatchSize`
samples (over all ranks) have been seen, then clips and steps. A non-finite loss on any rank
stops every rank before its backward pass (one small all-reduce), so no rank is left waiting
in a collective and no update is made from it.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rlhf_trainer.checkpoint_manifest import fsync_tree
from rlhf_trainer.models.qlora import is_quantized_model

from ..forward import trim_padding
from ..strategy import OptimSpec, init_train_engine
from ..zero_resume import load_engine_checkpoint, one_rank_training
from .base import RankBase, count_params

CHECKPOINT_TAG = "engine"


class NonFiniteLossError(FloatingPointError):
    pass


class TrainedRank(RankBase):
    engine: Any

    def build_engine(self, *, value_model: bool, learning_rate: float) -> int:
        """The trained model in a DeepSpeed engine, its packing checked: a causal LM (with
        LoRA and gradient checkpointing as asked), or a value model (backbone + a head seeded
        by `training.seed`: from a causal LM only the backbone loads). Its parameter count."""
        from rlhf_trainer.models.loading import load_trainable_causal_lm, load_value_model

        t = self.settings.job.training
        model: Any
        if value_model:
            model = load_value_model(
                self.settings.model_dir, torch.float32, self.load_options(), head_seed=t.seed
            )
            if t.gradient_checkpointing:
                model.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False}
                )
        else:
            model = load_trainable_causal_lm(
                self.settings.model_dir, t, self.load_options(), self.device
            )
        self.use_cpu_kernels(model)
        if t.compile:
            model.compile()  # in place: DeepSpeed's engine calls the compiled module
        optim = OptimSpec(learning_rate, self.settings.total_optimizer_steps)
        # One rank: ZeRO 1-2 partition over a group of one, so the engine runs stage 0.
        engine_t = one_rank_training(t, self.world_size, on_gpu=self.settings.on_gpu)
        self.engine = init_train_engine(
            model, engine_t, optim, self.world_size, on_gpu=self.settings.on_gpu
        )
        self.check_packing(self.engine, value_model=value_model)
        return count_params(model)

    def _shuffle_generator(self, step: int) -> torch.Generator:
        # The order depends only on (seed, step, rank): identical after a resume.
        seed = self.settings.job.training.seed
        return torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + self.rank)

    def check_finite(
        self,
        loss: Tensor,
        what: str,
        step: int,
        hint: str = "training diverged or the experience holds non-finite values; lower the "
        "learning rate, check the rewards, or enable gradient clipping (training.maxGradNorm)",
    ) -> None:
        """Every rank learns of a non-finite loss before any rank runs backward, so none is
        left waiting in a gradient all-reduce; `hint` says what to do about it."""
        bad = torch.tensor([0.0 if bool(torch.isfinite(loss)) else 1.0])
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bad.item() > 0:
            self.engine.zero_grad()
            raise NonFiniteLossError(
                f"{what} loss is not finite (NaN or inf) at step {step}: {hint}"
            )

    def _epochs(
        self,
        shard: dict[str, Tensor],
        step: int,
        what: str,
        micro_loss: Callable[[dict[str, Tensor]], tuple[Tensor, dict[str, Tensor]]],
    ) -> dict[str, float]:
        steps_before = self.engine.global_steps
        started = time.perf_counter()
        self.engine.train()
        if self.settings.train_threads:
            torch.set_num_threads(self.settings.train_threads)
        try:
            stats = self._run_epochs(shard, step, what, micro_loss, steps_before)
            # Time inside the rank (the driver's "training" adds transfers and waiting).
            stats["update_s"] = time.perf_counter() - started
            return stats
        finally:
            torch.set_num_threads(max(1, self.settings.threads))

    def _run_epochs(
        self,
        shard: dict[str, Tensor],
        step: int,
        what: str,
        micro_loss: Callable[[dict[str, Tensor]], tuple[Tensor, dict[str, Tensor]]],
        steps_before: int,
    ) -> dict[str, float]:
        t = self.settings.job.training
        rows = shard["action_mask"].shape[0]
        generator = self._shuffle_generator(step)
        sums: dict[str, float] = defaultdict(float)
        micro_steps = 0
        for _ in range(t.ppo_epochs):
            order = torch.randperm(rows, generator=generator)
            for start in range(0, rows, t.micro_train_batch_size):
                index = order[start : start + t.micro_train_batch_size]
                micro = self.to_device(trim_padding({k: v[index] for k, v in shard.items()}))
                loss, stats = micro_loss(micro)
                self.check_finite(loss, what, step)
                self.engine.backward(loss)
                self.engine.step()
                for key, value in stats.items():
                    sums[key] += float(value)
                micro_steps += 1
        out = {key: value / max(1, micro_steps) for key, value in sums.items()}
        grad_norm = self.engine.get_global_grad_norm()
        if grad_norm is not None:
            out["grad_norm"] = float(grad_norm)
        out["lr"] = float(self.engine.get_lr()[0])
        out["optimizer_steps"] = float(self.engine.global_steps - steps_before)
        return out

    # --- checkpoints ----------------------------------------------------------------------
    def save_checkpoint(self, directory: str) -> None:
        """Model, optimizer and scheduler states (every rank writes its ZeRO shard)."""
        path = Path(directory) / self.role
        self.engine.save_checkpoint(str(path), tag=CHECKPOINT_TAG)
        self.save_rng(str(path))
        # Flushed here, by the writer: on a network volume the driver's own fsync would not
        # flush another node's pages, and the driver publishes the checkpoint next.
        fsync_tree(path)

    def load_checkpoint(self, directory: str) -> None:
        path = Path(directory) / self.role
        load_path = load_engine_checkpoint(
            self.engine,
            path,
            CHECKPOINT_TAG,
            load_lr_scheduler_states=True,
            # bitsandbytes saves each 4-bit weight's quantisation state as extra keys
            # (`weight.absmax`, `weight.quant_map`, ...) that torch's strict load calls
            # unexpected; that state was rebuilt, identical, when the base loaded (QLoRA).
            load_module_strict=not is_quantized_model(self.engine.module),
        )
        if load_path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint of the {self.role} under {path}")
        self.load_rng(str(path))

    def params_finite(self) -> bool:
        """Whether this rank's (shard of the) weights is free of NaN/inf."""
        return all(
            bool(torch.isfinite(p.data).all()) for p in self.engine.module.parameters() if p.numel()
        )

    def optimizer_steps(self) -> int:
        return int(self.engine.global_steps)


def mean_over_ranks(stats: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for s in stats for k in s}
    out = {}
    for key in sorted(keys):
        values = [s[key] for s in stats if key in s and not math.isnan(s[key])]
        out[key] = sum(values) / len(values) if values else float("nan")
    return out
