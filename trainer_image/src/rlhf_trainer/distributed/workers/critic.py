"""The critic rank: a value model (backbone + scalar head) trained with DeepSpeed.

Initialised from the critic source (default: the first reward model, as in the PPO papers;
else the actor, with a fresh head). It gives the values of the experience and regresses them
towards the returns, with PPO's value clipping.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from rlhf_trainer.objectives.online import critic_objective

from ..forward import action_values, chunked
from ..weights import unwrap
from .base import RankBase, WorkerSettings
from .trained import TrainedRank


class CriticWorker(TrainedRank):
    def __init__(self, role: str, rank: int, world_size: int, settings: WorkerSettings) -> None:
        RankBase.__init__(self, role, rank, world_size, settings)

    def build(self) -> int:
        lr = self.settings.job.training.critic_learning_rate
        return self.build_engine(value_model=True, learning_rate=lr)

    def values(self, batch: dict[str, Tensor]) -> Tensor:
        self.engine.eval()
        size = self.settings.job.training.micro_rollout_batch_size
        return chunked(
            lambda micro: action_values(self.engine, self.to_device(micro), packed=self.packed),
            batch,
            size,
        ).cpu()

    def train(self, shard: dict[str, Tensor], step: int) -> dict[str, float]:
        clip = self.settings.job.algorithm.value_clip

        def micro_loss(micro: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
            values = action_values(self.engine, micro, packed=self.packed)
            return critic_objective(
                values, micro["old_values"], micro["returns"], micro["action_mask"], clip=clip
            )

        stats = self._epochs(shard, step, "critic", micro_loss)
        return {f"critic_{k}" if not k.startswith("value") else k: v for k, v in stats.items()}

    def export_hf(self, directory: str, tokenizer_dir: str) -> None:
        """The critic as an HF sequence-classification model (ZeRO-3 gathered on rank 0)."""
        from ..weights import state_dict_for_export

        weights = state_dict_for_export(self.engine, rank=self.rank, dtype=self.dtype)
        if self.rank != 0:
            return
        model: Any = unwrap(self.engine)
        hf = model.hf
        prefix = "hf."
        hf.save_pretrained(
            directory, state_dict={k.removeprefix(prefix): v for k, v in weights.items()}
        )
        from rlhf_trainer.models.loading import load_tokenizer

        load_tokenizer(tokenizer_dir, self.load_options()).save_pretrained(directory)
