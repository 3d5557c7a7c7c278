"""The policy rank of the iterative trainers (rejection sampling, iterative DPO).

It is the offline trainers' rank (`OfflineTrainRank`: one optimiser step of the SFT or the DPO
objective per `train_step` call, on `[B, K, L]` batches) and the online actor at once
(`ActorWorker`: the sending end of the weight sync to the vLLM engines, HF `generate` for
`rollout.engine: hf`). With `algorithm.refreshReference` it also gives the DPO reference
log-probs of a round's pairs: its own, before the round's update.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlhf_trainer.objectives.kinds import offline_spec

from .actor import ActorWorker
from .base import WorkerSettings
from .offline import OfflineTrainRank
from .offline_frozen import micro_sequence_logps


class IterativeActor(OfflineTrainRank, ActorWorker):
    # build, train_step and export_hf: OfflineTrainRank's; generate and the weight sync:
    # ActorWorker's; checkpoints: TrainedRank's (both share it).
    def __init__(self, role: str, rank: int, world_size: int, settings: WorkerSettings) -> None:
        ActorWorker.__init__(self, role, rank, world_size, settings)
        self.spec = offline_spec(settings.job)

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
            return super().train_step(shard, step)
        finally:
            torch.set_num_threads(max(1, self.settings.threads))
