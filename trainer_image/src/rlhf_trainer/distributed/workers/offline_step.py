"""One optimiser step of an offline objective on a trained rank's DeepSpeed engine.

The offline trainers' rank (`offline.OfflineTrainRank`) and the iterative trainers' policy
rank (`iterative.IterativeActor`, an actor that also takes offline steps) each hold one: the
step is a part of those ranks, not a base class of them.

A step is the rank's shard of the step batch in micro-batches of `microTrainBatchSize`,
gradients accumulated by DeepSpeed until `trainBatchSize` samples over all ranks, then clipped
and applied; a non-finite loss on any rank stops every rank before its backward.
"""

from __future__ import annotations

import math
from collections import defaultdict

from torch import Tensor

from rlhf_trainer.objectives.collate import trim_right
from rlhf_trainer.objectives.kinds import OfflineSpec, TrainerKind
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

from .trained import TrainedRank

DIVERGED = (
    "training diverged; lower training.actorLearningRate or training.maxGradNorm, "
    "or check the data for empty responses"
)


class OfflineStep:
    """`step(shard, n)`: one optimiser step of `spec`'s objective on `worker`'s engine."""

    def __init__(self, worker: TrainedRank, spec: OfflineSpec) -> None:
        self.worker, self.spec = worker, spec
        self._label_ids: tuple[int, int] | None = None

    def __call__(self, shard: dict[str, Tensor], step: int) -> dict[str, float]:
        """Train on this rank's shard (`microTrainBatchSize` x gradient accumulation rows)."""
        worker, engine = self.worker, self.worker.engine
        micro = worker.settings.job.training.micro_train_batch_size
        rows = shard["input_ids"].shape[0]
        expected = micro * int(engine.gradient_accumulation_steps())
        if rows != expected:
            raise ValueError(
                f"rank {worker.rank} got {rows} samples for step {step}; one optimiser step takes "
                f"microTrainBatchSize x gradient accumulation = {expected} per rank"
            )
        lr = float(engine.get_lr()[0])  # the rate this step's update uses
        engine.train()
        totals: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for start in range(0, rows, micro):
            part = worker.to_device(
                trim_right({k: v[start : start + micro] for k, v in shard.items()})
            )
            loss, stats = self.objective(part)
            worker.check_finite(loss, f"the {self.spec.algorithm.value}", step, DIVERGED)
            engine.backward(loss)
            engine.step()
            for key, value in stats.items():
                number = float(value)
                if math.isfinite(number):  # e.g. no undesirable KTO example in this micro-batch
                    totals[key] += number
                    counts[key] += 1
        out = {key: totals[key] / counts[key] for key in totals}
        # Every optimizer the engine steps reports it (at stage 0 ours: strategy.clips_itself).
        grad_norm = engine.get_global_grad_norm()
        if grad_norm is not None:
            out["grad_norm"] = float(grad_norm)
        out["lr"] = lr
        return out

    def objective(self, part: dict[str, Tensor]) -> tuple[Tensor, Stats]:
        spec, algo = self.spec, self.worker.settings.job.algorithm
        engine, packed = self.worker.engine, self.worker.packed
        if spec.kind is TrainerKind.SFT:
            return sft_objective(engine, part, packed=packed)
        if spec.kind is TrainerKind.DISTILLATION:
            return distillation_objective(engine, part, algo)
        if spec.kind is TrainerKind.PRM:
            return prm_objective(engine, part, *self._step_label_ids())
        if spec.kind is TrainerKind.REWARD_MODEL:
            scores = sequence_scores(engine, part, packed=packed)
            return reward_model_objective(scores, algo.margin)
        policy = sequence_logps_of(engine, part, average=spec.average_logps, packed=packed)
        if spec.kind is TrainerKind.PREFERENCE:
            return preference_objective(policy, part["ref_logps"], spec, algo)
        kl = self._mean_over_ranks(kl_reference_point(policy, part["ref_logps"]))
        return kto_objective(policy, part["ref_logps"], part["desirable"], kl, algo)

    def _step_label_ids(self) -> tuple[int, int]:
        """The PRM's positive and negative token ids (the data loader checked them)."""
        if self._label_ids is None:
            from rlhf_trainer.data.steps import step_ids
            from rlhf_trainer.models.loading import load_tokenizer

            settings = self.worker.settings
            tokenizer = load_tokenizer(settings.model_dir, self.worker.load_options())
            ids = step_ids(tokenizer, settings.job.algorithm.prm, "algorithm.prm")
            self._label_ids = (ids.positive, ids.negative)
        return self._label_ids

    def _mean_over_ranks(self, value: Tensor) -> Tensor:
        # KTO's reference point is a batch statistic: estimate it on the whole global batch.
        world_size = self.worker.world_size
        if world_size == 1:
            return value
        import torch.distributed as dist

        total = value.detach().float().cpu().reshape(1).clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return (total / world_size).reshape(()).to(value.device)
