"""DAPO's dynamic sampling (Yu et al. 2025, `algorithm.dynamicSampling`): keep only prompt
groups whose rewards differ, and generate more prompts until the step's batch is full.

A group estimator (GRPO, Dr. GRPO, RLOO, REINFORCE++-baseline) gives every sample of a group
whose rewards are all equal a zero advantage: the group only dilutes the batch. So each round
reads the next `rolloutBatchSize` prompts, generates and scores them, drops such groups, and
rounds go on until `rolloutBatchSize` informative groups are gathered (the surplus of the last
round is dropped, as DAPO does) or `dynamicSamplingMaxRounds` rounds have run. When the bound
is reached the batch is filled up with dropped groups, earliest first, so the step still
trains on a full batch (its optimizer steps and LR schedule as planned); such groups add no
policy-gradient signal, and the step reports how many it took (`dynamic_sampling/filled_groups`).

A group is dropped when its shaped scores (reward + DAPO overlong penalty, clipped: what the
advantages are computed from, before the affine running normalisation) span at most
`ZERO_SPREAD`. The data position after the last round is the step's, and each round's
sampling seeds are a function of (seed, step, round), so resuming from a checkpoint replays
the same rounds exactly.

With `rollout.async` the rounds run in the background producer (`pipeline.AsyncRollouts`),
scoring included, so each batch it hands over is already full and the next batch reads on from
where its rounds ended; all of a batch's rounds come from one policy version (no weight load
falls between them), the one passed in. With `rollout.partialRollout` loads land at once, also
between rounds: the version passed in is then the batch's oldest, which staleness counts from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from rlhf_trainer.algos.rewards import clip_rewards, overlong_penalty
from rlhf_trainer.config import JobConfig

from .batch import Sample
from .schedule import Rollout

log = logging.getLogger(__name__)

# Scores closer than this count as equal (rewards are float32 once scored).
ZERO_SPREAD = 1e-6
PREFIX = "dynamic_sampling/"

GroupRef = tuple[int, int]  # (round, group index within the round)


# --- the pure part ---------------------------------------------------------------------------
def informative_groups(scores: Sequence[float], group_size: int) -> list[bool]:
    """Per group of `group_size` adjacent scores: whether they are not all equal."""
    if group_size < 1 or len(scores) % group_size:
        raise ValueError(f"{len(scores)} scores do not split into groups of {group_size}")
    return [
        max(g) - min(g) > ZERO_SPREAD
        for g in (scores[i : i + group_size] for i in range(0, len(scores), group_size))
    ]


@dataclass(frozen=True)
class Selection:
    """Which groups a step trains on, in generation order, and the accounting of its rounds."""

    groups: list[GroupRef]
    rounds: int
    generated: int  # groups generated over all rounds
    dropped: int  # of them, groups with equal rewards
    filled: int  # dropped groups trained on all the same (the round bound was reached)

    def metrics(self) -> dict[str, float]:
        return {
            f"{PREFIX}filtered_fraction": self.dropped / self.generated if self.generated else 0.0,
            f"{PREFIX}extra_rounds": float(self.rounds - 1),
            f"{PREFIX}filled_groups": float(self.filled),
            f"{PREFIX}generated_groups": float(self.generated),
        }


def needs_another_round(rounds: Sequence[Sequence[bool]], need: int, max_rounds: int) -> bool:
    """Whether to generate again: fewer than `need` informative groups, rounds left."""
    kept = sum(sum(r) for r in rounds)
    return kept < need and len(rounds) < max_rounds


def select_groups(rounds: Sequence[Sequence[bool]], need: int) -> Selection:
    """The first `need` informative groups; when there are fewer, the batch is filled up with
    dropped groups, earliest first. Raises when all rounds together hold fewer than `need`."""
    refs = [(r, g) for r, flags in enumerate(rounds) for g in range(len(flags))]
    informative = [ref for ref in refs if rounds[ref[0]][ref[1]]]
    dropped = [ref for ref in refs if not rounds[ref[0]][ref[1]]]
    if len(refs) < need:
        raise ValueError(f"{len(refs)} groups generated; a step needs {need}")
    chosen = informative[:need]
    filled = dropped[: need - len(chosen)]
    return Selection(
        groups=sorted(chosen + filled),
        rounds=len(rounds),
        generated=len(refs),
        dropped=len(dropped),
        filled=len(filled),
    )


def mean_metrics(parts: Sequence[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Per-round metric means (with their sample counts) -> means over all rounds' samples."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for n, metrics in parts:
        for key, value in metrics.items():
            totals[key] = totals.get(key, 0.0) + value * n
            counts[key] = counts.get(key, 0) + n
    return {k: totals[k] / counts[k] for k in totals if counts[k]}


# --- rounds against the engines -------------------------------------------------------------
class RoundSource(Protocol):
    """What the rounds need of the driver (`loop.driver.Trainer`)."""

    cfg: JobConfig

    def next_prompts(self, position: int) -> tuple[list[Any], int]: ...

    def generate(self, step: int, items: list[Any], *, stream: str = "") -> list[Sample]: ...

    def score(self, samples: list[Sample]) -> tuple[Tensor, dict[str, float]]: ...


def shaped_scores(raw: Tensor, samples: list[Sample], cfg: JobConfig) -> Tensor:
    """Reward + overlong penalty, clipped: the scores a group's advantages come from."""
    algo = cfg.algorithm
    scores = raw
    if algo.overlong_buffer is not None:
        lengths = torch.tensor([s.generated_tokens for s in samples])
        scores = scores + overlong_penalty(
            lengths, cfg.rollout.max_new_tokens, algo.overlong_buffer, algo.overlong_penalty
        )
    if algo.reward_clip is not None:
        scores = clip_rewards(scores, algo.reward_clip)
    return scores


def dynamic_rollout(
    source: RoundSource, step: int, position: int, policy_version: int | None = None
) -> Rollout:
    """Rounds of `rolloutBatchSize` prompts from data `position` until the batch holds that
    many informative groups (or the round bound is reached); see the module's docstring.
    `policy_version`: the weights that generate all the rounds (default: step - 1, sync)."""
    cfg = source.cfg
    need, n = cfg.training.rollout_batch_size, cfg.rollout.samples_per_prompt
    max_rounds = cfg.algorithm.dynamic_sampling_max_rounds
    start = time.perf_counter()
    rounds: list[list[bool]] = []
    generated: list[tuple[list[Sample], Tensor]] = []
    reward_metrics: list[tuple[int, dict[str, float]]] = []
    while not rounds or needs_another_round(rounds, need, max_rounds):
        items, position = source.next_prompts(position)
        # The first round draws as a step without dynamic sampling does.
        stream = f"round{len(rounds)}" if rounds else ""
        samples = source.generate(step, items, stream=stream)
        raw, metrics = source.score(samples)
        rounds.append(informative_groups(shaped_scores(raw, samples, cfg).tolist(), n))
        generated.append((samples, raw))
        reward_metrics.append((len(samples), metrics))
    selection = select_groups(rounds, need)
    if selection.filled:
        log.warning(
            "step %d: %d rounds (algorithm.dynamicSamplingMaxRounds) gave %d of %d prompt "
            "groups with differing rewards; the batch is filled up with %d groups whose "
            "rewards are all equal (too easy or too hard data?)",
            step,
            selection.rounds,
            need - selection.filled,
            need,
            selection.filled,
        )
    samples, rewards = [], []
    for r, g in selection.groups:
        round_samples, round_raw = generated[r]
        samples += round_samples[g * n : (g + 1) * n]
        rewards.append(round_raw[g * n : (g + 1) * n])
    raw = torch.cat(rewards)
    every = torch.cat([r for _, r in generated])
    metrics = selection.metrics()
    # `reward` is the policy's: the mean over every generated sample, as a run without dynamic
    # sampling reports it (the kept groups' mean drifts towards the middle by construction).
    metrics |= {"reward": float(every.mean()), f"{PREFIX}batch_reward": float(raw.mean())}
    return Rollout(
        step,
        position,
        step - 1 if policy_version is None else policy_version,
        samples,
        time.perf_counter() - start,
        scored=(raw, mean_metrics(reward_metrics)),
        metrics=metrics,
    )
