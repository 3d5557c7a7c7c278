"""Frozen ranks: the reference policy (log-probs), reward models (sequence scores) and process
reward models (step scores aggregated per response).

They are sharded by a ZeRO-3 inference engine when `training.zeroStage` is 3 (so a large
reference fits beside the actor), else kept whole on each rank.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlhf_trainer.models.packing import token_values
from rlhf_trainer.models.value import gather_last_real

from ..forward import action_log_probs, chunked
from ..plan import REWARD
from ..strategy import init_eval_engine
from .base import RankBase, count_params


class ReferenceWorker(RankBase):
    def build(self) -> int:
        from rlhf_trainer.models.loading import load_causal_lm

        model = load_causal_lm(self.settings.model_dir, self.dtype, self.load_options())
        self.use_cpu_kernels(model)
        self.model = init_eval_engine(
            model, self.settings.job.training, self.world_size, self.device
        )
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
        self.use_cpu_kernels(model)
        self.model = init_eval_engine(
            model, self.settings.job.training, self.world_size, self.device
        )
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


class ProcessRewardWorker(RankBase):
    """A process reward model (`rewardModels[i].process`): a causal LM trained by algorithm prm,
    read at each step's separator token of the re-encoded response (`rewards.process`)."""

    def build(self) -> int:
        from rlhf_trainer.data.steps import step_ids
        from rlhf_trainer.models.loading import load_causal_lm, load_tokenizer

        index = int(self.role.removeprefix(REWARD))
        process = self.settings.job.models.reward_models[index].process
        if process is None:  # the cluster starts this worker only for a process model
            raise ValueError(f"models.rewardModels[{index}] is not a process reward model")
        self.process = process
        options = self.load_options()
        self.tokenizer = load_tokenizer(self.settings.model_dir, options)
        self.ids = step_ids(self.tokenizer, process, f"models.rewardModels[{index}].process")
        model = load_causal_lm(self.settings.model_dir, self.dtype, options)
        self.use_cpu_kernels(model)
        self.model = init_eval_engine(
            model, self.settings.job.training, self.world_size, self.device
        )
        return count_params(model)

    @torch.no_grad()
    def scores(self, batch: dict[str, Tensor]) -> Tensor:
        """`[B]` rewards: each response's step scores, aggregated."""
        from rlhf_trainer.rewards.process import process_batch, process_rewards

        size = self.settings.job.training.micro_rollout_batch_size
        rows, width = batch["input_ids"].shape[0], batch["action_mask"].shape[1]
        out = []
        for start in range(0, rows, size):
            steps = process_batch(
                batch["input_ids"][start : start + size],
                batch["attention_mask"][start : start + size],
                width,
                self.tokenizer,
                self.ids,
                self.process.separator,
            )
            logits = self.model(
                input_ids=steps["input_ids"].to(self.device),
                attention_mask=steps["attention_mask"].to(self.device),
                use_cache=False,
            ).logits
            rewards = process_rewards(
                logits, steps["step_mask"].to(self.device), self.ids, self.process.aggregation.value
            )
            out.append(rewards.float().cpu())
        return torch.cat(out) if out else torch.zeros(0)
