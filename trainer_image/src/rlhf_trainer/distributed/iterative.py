"""The cluster of the iterative trainers: the online roles (vLLM engines, weight sync, reward
models) with the policy trained by an offline objective (`workers.iterative.IterativeActor`)
and, for iterative DPO with a fixed reference, the offline trainers' reference ranks, which
compute sequence log-probs with the very function the policy's training forward uses.
"""

from __future__ import annotations

from torch import Tensor

from .cluster import TrainingCluster
from .groups import Pending, split_rows
from .workers.iterative import IterativeActor
from .workers.offline_frozen import OfflineReferenceRank, sequence_logps_over
from .workers.trained import mean_over_ranks


class IterativeCluster(TrainingCluster):
    actor_worker = IterativeActor
    reference_worker = OfflineReferenceRank

    def reference_logps(self, batch: dict[str, Tensor]) -> Pending:
        """`[B, 2]` reference log-probs of a round's (chosen, rejected) pairs: the fixed
        reference's, or with `algorithm.refreshReference` the policy's before the update."""
        group = self.actor if self.job.algorithm.refresh_reference else self.reference
        if group is None:
            raise RuntimeError("iterative-dpo with a fixed reference has no reference placed")
        return sequence_logps_over(group, batch, self.job.training.micro_train_batch_size)

    def train_step(self, batch: dict[str, Tensor], step: int) -> Pending:
        """One optimiser step on `trainBatchSize` rows split evenly over the policy's ranks;
        result: the objective's statistics averaged over ranks."""
        shards = split_rows(batch, self.actor.size)
        return Pending(
            [w.train_step.remote(s, step) for w, s in zip(self.actor.workers, shards, strict=True)],
            mean_over_ranks,
        )
