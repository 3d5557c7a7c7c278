"""The offline trainers' trained rank; the cluster over it is `distributed.offline`, the
frozen ranks beside it (reference, teacher) are in `offline_frozen`.

`OfflineTrainRank`: the trained model (a causal LM, or a value model for reward-model
training) in a DeepSpeed engine, data-parallel over `placement.actorGpus` ranks. One
`train_step` call is one optimiser step: the rank's shard of the step batch in micro-batches of
`microTrainBatchSize`, gradients accumulated by DeepSpeed until `trainBatchSize` samples over
all ranks, then clipped and applied.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch
from torch import Tensor

from rlhf_trainer.objectives.collate import trim_right
from rlhf_trainer.objectives.kinds import TrainerKind, offline_spec
from rlhf_trainer.objectives.offline import (
    Stats,
    distillation_objective,
    kl_reference_point,
    kto_objective,
    preference_objective,
    prm_objective,
    reward_model_objective,
    sequence_logps_of,
    sequence_scores,
    sft_objective,
)

from ..strategy import OptimSpec, init_train_engine
from ..weights import state_dict_for_export, unwrap
from .base import RankBase, WorkerSettings, count_params
from .trained import TrainedRank

VALUE_MODEL_PREFIX = "hf."


DIVERGED = (
    "training diverged; lower training.actorLearningRate or training.maxGradNorm, "
    "or check the data for empty responses"
)


class OfflineTrainRank(TrainedRank):
    def __init__(self, role: str, rank: int, world_size: int, settings: WorkerSettings) -> None:
        RankBase.__init__(self, role, rank, world_size, settings)
        self.spec = offline_spec(settings.job)

    def build(self) -> int:
        t = self.settings.job.training
        model: Any
        if self.spec.model_kind == "reward":
            from rlhf_trainer.models.loading import load_value_model

            # From a causal LM only the backbone loads and the head is seeded (deterministic).
            model = load_value_model(
                self.settings.model_dir, torch.float32, self.load_options(), head_seed=t.seed
            )
            if t.gradient_checkpointing:
                model.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False}
                )
        else:
            model = self._causal_lm()
        optim = OptimSpec(t.actor_learning_rate, self.settings.total_optimizer_steps)
        self.engine = init_train_engine(
            model, t, optim, self.world_size, on_gpu=self.settings.on_gpu
        )
        self.check_packing(self.engine, value_model=self.spec.model_kind == "reward")
        return count_params(model)

    def _causal_lm(self) -> Any:
        from rlhf_trainer.models.loading import load_trainable_causal_lm

        return load_trainable_causal_lm(
            self.settings.model_dir, self.settings.job.training, self.load_options(), self.device
        )

    # --- one optimiser step ---------------------------------------------------------------
    def train_step(self, shard: dict[str, Tensor], step: int) -> dict[str, float]:
        """Train on this rank's shard (`microTrainBatchSize` x gradient accumulation rows)."""
        micro = self.settings.job.training.micro_train_batch_size
        rows = shard["input_ids"].shape[0]
        expected = micro * int(self.engine.gradient_accumulation_steps())
        if rows != expected:
            raise ValueError(
                f"rank {self.rank} got {rows} samples for step {step}; one optimiser step takes "
                f"microTrainBatchSize x gradient accumulation = {expected} per rank"
            )
        lr = float(self.engine.get_lr()[0])  # the rate this step's update uses
        self.engine.train()
        totals: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        dense_norm = None
        for start in range(0, rows, micro):
            part = self.to_device(
                trim_right({k: v[start : start + micro] for k, v in shard.items()})
            )
            loss, stats = self.objective(part)
            self._check_finite(loss, f"the {self.spec.algorithm.value}", step, DIVERGED)
            self.engine.backward(loss)
            if start + micro >= rows and self.settings.job.training.zero_stage == 0:
                dense_norm = self._dense_grad_norm()
            self.engine.step()
            for key, value in stats.items():
                number = float(value)
                if math.isfinite(number):  # e.g. no undesirable KTO example in this micro-batch
                    totals[key] += number
                    counts[key] += 1
        out = {key: totals[key] / counts[key] for key in totals}
        grad_norm = self.engine.get_global_grad_norm()
        grad_norm = dense_norm if grad_norm is None else grad_norm
        if grad_norm is not None:
            out["grad_norm"] = float(grad_norm)
        out["lr"] = lr
        return out

    def _dense_grad_norm(self) -> float | None:
        """Global gradient norm before clipping, for ZeRO-0, where DeepSpeed does not report
        it: after the boundary's backward every rank holds the all-reduced gradients."""
        norms = [
            p.grad.detach().float().norm() for p in self.engine.parameters() if p.grad is not None
        ]
        # None where the gradients live elsewhere (e.g. bf16's fp32 master copies).
        return float(torch.stack(norms).norm()) if norms else None

    def objective(self, part: dict[str, Tensor]) -> tuple[Tensor, Stats]:
        spec, algo = self.spec, self.settings.job.algorithm
        if spec.kind is TrainerKind.SFT:
            return sft_objective(self.engine, part, packed=self.packed)
        if spec.kind is TrainerKind.DISTILLATION:
            return distillation_objective(self.engine, part, algo)
        if spec.kind is TrainerKind.PRM:
            return prm_objective(self.engine, part, *self._step_label_ids())
        if spec.kind is TrainerKind.REWARD_MODEL:
            scores = sequence_scores(self.engine, part, packed=self.packed)
            return reward_model_objective(scores, algo.margin)
        policy = sequence_logps_of(
            self.engine, part, average=spec.average_logps, packed=self.packed
        )
        if spec.kind is TrainerKind.PREFERENCE:
            return preference_objective(policy, part["ref_logps"], spec, algo)
        kl = self._mean_over_ranks(kl_reference_point(policy, part["ref_logps"]))
        return kto_objective(policy, part["ref_logps"], part["desirable"], kl, algo)

    def _step_label_ids(self) -> tuple[int, int]:
        """The PRM's positive and negative token ids (the data loader checked them)."""
        if not hasattr(self, "_label_ids"):
            from rlhf_trainer.data.steps import step_ids
            from rlhf_trainer.models.loading import load_tokenizer

            tokenizer = load_tokenizer(self.settings.model_dir, self.load_options())
            ids = step_ids(tokenizer, self.settings.job.algorithm.prm, "algorithm.prm")
            self._label_ids = (ids.positive, ids.negative)
        return self._label_ids

    def _mean_over_ranks(self, value: Tensor) -> Tensor:
        # KTO's reference point is a batch statistic: estimate it on the whole global batch.
        if self.world_size == 1:
            return value
        import torch.distributed as dist

        total = value.detach().float().cpu().reshape(1).clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return (total / self.world_size).reshape(()).to(value.device)

    # --- export ---------------------------------------------------------------------------
    def export_hf(self, directory: str, tokenizer_dir: str) -> None:
        """HF format (`from_pretrained` loads it): a causal LM with LoRA merged, or the value
        model as a sequence-classification model (usable as `rewardModels` / critic init)."""
        weights = state_dict_for_export(self.engine, rank=self.rank, dtype=self.dtype)
        if self.rank != 0:
            return
        model: Any = unwrap(self.engine)
        if self.spec.model_kind == "reward":
            renamed = {k.removeprefix(VALUE_MODEL_PREFIX): v for k, v in weights.items()}
            model.hf.save_pretrained(directory, state_dict=renamed)
        else:
            from rlhf_trainer.models.qlora import savable_base

            savable_base(model).save_pretrained(directory, state_dict=weights)
        from rlhf_trainer.models.loading import load_tokenizer

        load_tokenizer(tokenizer_dir, self.load_options()).save_pretrained(directory)
