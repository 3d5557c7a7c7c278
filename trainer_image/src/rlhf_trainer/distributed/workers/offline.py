"""The offline trainers' trained rank; the cluster over it is `distributed.offline`, the
frozen ranks beside it (reference, teacher) are in `offline_frozen`.

`OfflineTrainRank`: the trained model (a causal LM, or a value model for reward-model
training) in a DeepSpeed engine, data-parallel over `placement.actorGpus` ranks. One
`train_step` call is one optimiser step (`offline_step.OfflineStep`).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from rlhf_trainer.objectives.kinds import offline_spec

from ..weights import state_dict_for_export, unwrap
from .base import RankBase, WorkerSettings
from .offline_step import OfflineStep
from .trained import TrainedRank

VALUE_MODEL_PREFIX = "hf."


class OfflineTrainRank(TrainedRank):
    def __init__(self, role: str, rank: int, world_size: int, settings: WorkerSettings) -> None:
        RankBase.__init__(self, role, rank, world_size, settings)
        self.spec = offline_spec(settings.job)
        self.offline_step = OfflineStep(self, self.spec)

    def build(self) -> int:
        # A reward model is trained as a value model; everything else as a causal LM.
        lr = self.settings.job.training.actor_learning_rate
        return self.build_engine(value_model=self.spec.model_kind == "reward", learning_rate=lr)

    def train_step(self, shard: dict[str, Tensor], step: int) -> dict[str, float]:
        return self.offline_step(shard, step)

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
