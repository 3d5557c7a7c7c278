"""A round of rejection sampling or iterative DPO, as the online loop's stages:

generate (the policy's samples on the engines) -> experience (score them, select the round's
data set, for DPO its reference log-probs) -> update (`training.epochs` passes over the data
set in optimiser steps of `trainBatchSize`) -> sync weights -> checkpoint -> report.

`IterativeTrainer` is the online `Trainer` with two stages of its own, so the loop, its stop
points, checkpoints, resume and failure handling are the online loop's: a round is one step, a
stop request is honoured before the round's update, and a round interrupted anywhere is redone
whole from the last checkpoint on resume (its samples come from per-prompt seeds, its order
from (seed, round, epoch): in deterministic mode the redone round is the same round).
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor

from rlhf_trainer.checkpoint import TrainerState
from rlhf_trainer.config import AlgorithmName
from rlhf_trainer.context.protocols import Pending
from rlhf_trainer.context.steploop import check_finite
from rlhf_trainer.loop.batch import Sample, to_batch
from rlhf_trainer.loop.cluster import OnlineCluster
from rlhf_trainer.loop.driver import Trainer
from rlhf_trainer.loop.schedule import Rollout
from rlhf_trainer.objectives.collate import pad_sequences
from rlhf_trainer.reporting.timing import StageTimer

from .selection import at_least, best_of_n, preference_pairs, round_batches

# A round's data set as `[M, K, L]` tensors (offline layout, K = 1 for SFT, 2 for pairs).
Experience = dict[str, Tensor]


class IterativeCluster(OnlineCluster, Protocol):
    """The online cluster whose policy trains with an offline objective
    (`distributed.iterative.IterativeCluster`)."""

    def reference_logps(self, batch: Experience) -> Pending[Tensor]: ...
    def train_step(self, batch: Experience, step: int) -> Pending[dict[str, float]]: ...


class IterativeTrainer(Trainer[IterativeCluster]):
    @property
    def pairs(self) -> bool:
        return self.cfg.algorithm.name is AlgorithmName.ITERATIVE_DPO

    def make_experience(
        self, step: int, rollout: Rollout, state: TrainerState, timer: StageTimer
    ) -> tuple[Experience, dict[str, float], dict[str, Any]]:
        """Score the round's samples (here, not ahead: dynamic sampling, which alone scores
        ahead, is refused for the iterative algorithms), select the round's data set, and
        (DPO) its reference log-probs."""
        samples = rollout.samples
        batch = to_batch(samples, self.pad_id)
        with timer("reward"):
            raw, reward_metrics = self.score(samples)
        check_finite("the combined reward", raw, step, "a reward source returned NaN/inf")
        rewards = [float(r) for r in raw]
        mask = batch["action_mask"]
        metrics = {
            # The policy's samples of this round, before its update: the curve that must rise.
            "reward": float(raw.mean()),
            "reward_std": float(raw.std()) if len(raw) > 1 else 0.0,
            "response_length": float(mask.sum(-1).float().mean()),
            "truncated": sum(s.finish_reason == "length" for s in samples) / len(samples),
            "generated_tokens": float(mask.sum()),
            **reward_metrics,
        }
        sequences, selected = self.select(samples, rewards, metrics)
        if not sequences:
            return {}, metrics, {}
        experience = pad_sequences(sequences, self.pad_id)
        metrics["reward_selected"] = sum(rewards[i] for i in selected) / len(selected)
        if self.pairs:
            experience["ref_logps"] = self.cluster.reference_logps(experience).result()
        return experience, metrics, {}

    def select(
        self, samples: list[Sample], rewards: list[float], metrics: dict[str, float]
    ) -> tuple[list[list[tuple[list[int], list[int]]]], list[int]]:
        """The round's (prompt, response) sequences per item, and the samples they train on
        towards (the chosen ones for pairs); adds the selection's counts to `metrics`."""
        n, algo = self.cfg.rollout.samples_per_prompt, self.cfg.algorithm
        prompts = len(samples) // n
        if self.pairs:
            pairs = preference_pairs(rewards, n)
            metrics["pairs"] = float(len(pairs))
            metrics["ties"] = float(prompts - len(pairs))
            if pairs:
                rejected = [rewards[r] for _, r in pairs]
                metrics["reward_rejected"] = sum(rejected) / len(rejected)
            sequences = [
                [
                    (samples[c].prompt_ids, samples[c].response_ids),
                    (samples[r].prompt_ids, samples[r].response_ids),
                ]
                for c, r in pairs
            ]
            return sequences, [c for c, _ in pairs]
        if algo.reward_threshold is not None:
            chosen = at_least(rewards, algo.reward_threshold)
        else:
            chosen = best_of_n(rewards, n)
        metrics["selected"] = float(len(chosen))
        return [[(samples[i].prompt_ids, samples[i].response_ids)] for i in chosen], chosen

    def update(self, step: int, batch: Experience) -> dict[str, float]:
        """`training.epochs` passes over the round's data set, one optimiser step per
        `trainBatchSize` items; the statistics averaged over the steps."""
        t = self.cfg.training
        count = int(batch["input_ids"].shape[0]) if batch else 0
        order = round_batches(
            count, epochs=t.epochs, batch_size=t.train_batch_size, seed=t.seed, round_=step
        )
        sums: dict[str, float] = {}
        for rows in order:
            stats = self.cluster.train_step({k: v[rows] for k, v in batch.items()}, step).result()
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        metrics = {key: value / len(order) for key, value in sums.items()}
        metrics["optimizer_steps"] = float(len(order))
        return metrics
