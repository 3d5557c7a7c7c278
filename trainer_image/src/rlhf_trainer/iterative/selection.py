"""Which of a round's samples are trained on, and in which order (pure, no torch).

Samples arrive prompt by prompt, `group_size` (= `rollout.samplesPerPrompt`) adjacent samples
per prompt, as the rollout lays them out. Ties are broken towards the earlier sample, so a
selection is a function of the rewards alone (deterministic runs select the same samples).
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def _groups(rewards: Sequence[float], group_size: int) -> list[range]:
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(
            f"{len(rewards)} rewards do not split into groups of {group_size} samples per prompt"
        )
    return [range(start, start + group_size) for start in range(0, len(rewards), group_size)]


def best_of_n(rewards: Sequence[float], group_size: int) -> list[int]:
    """The index of each prompt's highest-reward sample (the first of equals)."""
    return [max(group, key=lambda i: rewards[i]) for group in _groups(rewards, group_size)]


def at_least(rewards: Sequence[float], threshold: float) -> list[int]:
    """Every sample whose reward reaches `threshold`, in sample order."""
    return [i for i, r in enumerate(rewards) if r >= threshold]


def preference_pairs(rewards: Sequence[float], group_size: int) -> list[tuple[int, int]]:
    """(chosen, rejected) per prompt: its best and its worst sample. A prompt whose samples
    all score the same says nothing about what is preferred: it is skipped."""
    pairs = []
    for group in _groups(rewards, group_size):
        chosen = max(group, key=lambda i: rewards[i])
        rejected = min(group, key=lambda i: rewards[i])
        if rewards[chosen] > rewards[rejected]:
            pairs.append((chosen, rejected))
    return pairs


def round_batches(
    count: int, *, epochs: int, batch_size: int, seed: int, round_: int
) -> list[list[int]]:
    """The optimiser steps of a round over its `count` selected items: `epochs` passes, each
    a fresh shuffle (a function of seed, round and epoch only: the same after a resume), cut
    into batches of `batch_size`. A pass whose length is not a multiple of `batch_size` is
    filled up by wrapping around its own order, so every item is trained on in every pass and
    a round with fewer items than one batch still takes a step. No items: no steps."""
    if count == 0:
        return []
    batches: list[list[int]] = []
    for epoch in range(epochs):
        order = list(range(count))
        random.Random(seed * 1_000_003 + round_ * 1_009 + epoch).shuffle(order)
        steps = -(-count // batch_size)
        filled = [order[i % count] for i in range(steps * batch_size)]
        batches += [filled[i : i + batch_size] for i in range(0, len(filled), batch_size)]
    return batches


def max_round_items(group_count: int, group_size: int, *, every_sample: bool) -> int:
    """The most items a round can select: one per prompt (best-of-n, pairs), or every sample
    (a reward threshold)."""
    return group_count * group_size if every_sample else group_count


def max_optimizer_steps(rounds: int, items: int, *, epochs: int, batch_size: int) -> int:
    """An upper bound of the run's optimiser steps (the LR schedule's length): every round
    selecting `items` items."""
    return rounds * epochs * -(-items // batch_size)
