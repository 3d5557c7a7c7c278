"""Frozen ranks: the reference policy (log-probs) and reward models (sequence scores).

They are sharded by a ZeRO-3 inference engine when `training.zeroStage` is 3 (so a large
reference fits beside the actor), else kept whole on each rank.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlhf_trainer.models.packing import token_values
from rlhf_trainer.models.value import gather_last_real

from ..forward import action_log_probs, chunked
from ..strategy import init_eval_engine
from .base import RankBase, count_params


class ReferenceWorker(RankBase):
    def build(self) -> int:
        from rlhf_trainer.models.loading import load_causal_lm

        model = load_causal_lm(self.settings.model_dir, self.dtype, self.load_options())
        self.model = init_eval_engine(model, self.settings.job.training, self.world_size)
        self.check_packing(self.model)
        return count_params(model)

    def log_probs(self, batch: dict[str, Tensor]) -> Tensor:
        temperature = self.settings.job.rollout.temperature
        size = self.settings.job.training.micro_rollout_batch_size
        return chunked(
            lambda micro: action_log_probs(
                self.model, self.to_device(micro), temperature, packed=self.packed
            )[0],
            batch,
            size,
        ).cpu()


class RewardModelWorker(RankBase):
    def build(self) -> int:
        from rlhf_trainer.models.loading import load_value_model

        model = load_value_model(self.settings.model_dir, self.dtype, self.load_options())
        self.model = init_eval_engine(model, self.settings.job.training, self.world_size)
        self.check_packing(self.model, value_model=True)
        return count_params(model)

    @torch.no_grad()
    def scores(self, batch: dict[str, Tensor]) -> Tensor:
        """`[B]` sequence scores: the head's value at each row's last real token."""
        size = self.settings.job.training.micro_rollout_batch_size
        rows = batch["input_ids"].shape[0]
        out = []
        for start in range(0, rows, size):
            ids = batch["input_ids"][start : start + size].to(self.device)
            mask = batch["attention_mask"][start : start + size].to(self.device)
            values = token_values(self.model, ids, mask, packed=self.packed)
            out.append(gather_last_real(values, mask).float().cpu())
        return torch.cat(out) if out else torch.zeros(0)
