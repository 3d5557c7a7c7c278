"""The policy rank of the iterative trainers (rejection sampling, iterative DPO).

It is the online actor (`ActorWorker`: its model and engine, the sending end of the weight sync
to the vLLM engines, HF `generate` for `rollout.engine: hf`, checkpoints and export) that trains
with an offline objective: each `train_step` call is one optimiser step of the SFT or the DPO
objective on `[B, K, L]` batches, taken by the `OfflineStep` it holds (the offline trainers'
rank holds one too). With `algorithm.refreshReference` it also gives the DPO reference
log-probs of a round's pairs: its own, before the round's update.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlhf_trainer.objectives.kinds import offline_spec

from .actor import ActorWorker
from .base import WorkerSettings
from .offline_frozen import micro_sequence_logps
from .offline_step import OfflineStep


class IterativeActor(ActorWorker):
    def __init__(self, role: str, rank: int, world_size: int, settings: WorkerSettings) -> None:
        super().__init__(role, rank, world_size, settings)
        self.offline_step = OfflineStep(self, offline_spec(settings.job))

    def sequence_logps(self, shard: dict[str, Tensor], micro_steps: int) -> Tensor:
        """`[b, K]` log-probs of the shard's sequences under the current policy, computed
        exactly as the training forward computes them."""
        self.engine.eval()
        return micro_sequence_logps(self, self.engine, shard, micro_steps)

    def train_step(self, shard: dict[str, Tensor], step: int) -> dict[str, float]:
        # On CPUs the update is the only busy stage then: it takes the trained ranks' threads.
        if self.settings.train_threads:
            torch.set_num_threads(self.settings.train_threads)
        try:
            return self.offline_step(shard, step)
        finally:
            torch.set_num_threads(max(1, self.settings.threads))
