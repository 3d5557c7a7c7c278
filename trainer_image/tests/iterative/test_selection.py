"""The pure selection logic of the iterative trainers: best-of-n, a reward threshold,
chosen/rejected pairs (ties skipped) and the order of a round's optimiser steps."""

from __future__ import annotations

import pytest

from rlhf_trainer.iterative.selection import (
    at_least,
    best_of_n,
    max_optimizer_steps,
    max_round_items,
    preference_pairs,
    round_batches,
)


@pytest.mark.parametrize(
    ("rewards", "n", "expected"),
    [
        pytest.param([0.1, 0.9, 0.5, 0.2, 0.3, 0.1], 3, [1, 4], id="best-of-each-group"),
        pytest.param([0.5, 0.5, 0.2, 0.7, 0.7, 0.1], 3, [0, 3], id="ties-go-to-the-first"),
        pytest.param([1.0, 0.0], 1, [0, 1], id="n=1-keeps-every-sample"),
        pytest.param([-2.0, -1.0, -3.0, -0.5], 2, [1, 3], id="negative-rewards"),
    ],
)
def test_best_of_n(rewards: list[float], n: int, expected: list[int]) -> None:
    assert best_of_n(rewards, n) == expected


def test_groups_must_divide_the_samples() -> None:
    with pytest.raises(ValueError, match="groups of 4"):
        best_of_n([0.1, 0.2, 0.3], 4)
    with pytest.raises(ValueError, match="groups of 2"):
        preference_pairs([0.1, 0.2, 0.3], 2)


@pytest.mark.parametrize(
    ("rewards", "threshold", "expected"),
    [
        pytest.param([0.1, 0.9, 0.5, 0.5], 0.5, [1, 2, 3], id="at-least-is-inclusive"),
        pytest.param([0.1, 0.2], 0.5, [], id="none-reaches-it"),
        pytest.param([0.9, 0.8, 0.7], 0.0, [0, 1, 2], id="all-reach-it"),
    ],
)
def test_at_least(rewards: list[float], threshold: float, expected: list[int]) -> None:
    assert at_least(rewards, threshold) == expected


@pytest.mark.parametrize(
    ("rewards", "n", "expected"),
    [
        pytest.param([0.2, 0.9, 0.1, 0.5], 2, [(1, 0), (3, 2)], id="best-and-worst-per-prompt"),
        pytest.param([0.3, 0.3, 0.3, 0.1, 0.8, 0.1], 3, [(4, 3)], id="all-equal-prompt-skipped"),
        pytest.param([0.5, 0.9, 0.9, 0.2], 4, [(1, 3)], id="equal-best-first-one-chosen"),
        pytest.param([0.0, 0.0, 0.0, 0.0], 2, [], id="only-ties-no-pairs"),
    ],
)
def test_preference_pairs(rewards: list[float], n: int, expected: list[tuple[int, int]]) -> None:
    pairs = preference_pairs(rewards, n)
    assert pairs == expected
    for chosen, rejected in pairs:
        assert rewards[chosen] > rewards[rejected]
        assert chosen // n == rejected // n  # a pair never mixes prompts


def test_round_batches_cover_every_item_each_epoch() -> None:
    batches = round_batches(10, epochs=2, batch_size=4, seed=1, round_=3)
    # 10 items -> 3 steps of 4 per pass (2 items repeated to fill the last), 2 passes.
    assert len(batches) == 6
    assert all(len(b) == 4 for b in batches)
    for epoch in range(2):
        seen = [i for b in batches[epoch * 3 : epoch * 3 + 3] for i in b]
        assert set(seen) == set(range(10))
    first_pass = [i for b in batches[:3] for i in b]
    second_pass = [i for b in batches[3:] for i in b]
    assert first_pass != second_pass  # each pass is shuffled anew


def test_round_batches_are_a_function_of_seed_round_and_epoch_only() -> None:
    a = round_batches(7, epochs=3, batch_size=2, seed=5, round_=2)
    assert a == round_batches(7, epochs=3, batch_size=2, seed=5, round_=2)
    assert a != round_batches(7, epochs=3, batch_size=2, seed=5, round_=3)
    assert a != round_batches(7, epochs=3, batch_size=2, seed=6, round_=2)


def test_a_round_smaller_than_a_batch_still_takes_a_step_and_an_empty_one_none() -> None:
    assert sorted(round_batches(2, epochs=1, batch_size=4, seed=0, round_=1)[0]) == [0, 0, 1, 1]
    assert round_batches(1, epochs=2, batch_size=3, seed=0, round_=1) == [[0, 0, 0], [0, 0, 0]]
    assert round_batches(0, epochs=3, batch_size=4, seed=0, round_=1) == []


def test_schedule_bound() -> None:
    assert max_round_items(16, 8, every_sample=False) == 16
    assert max_round_items(16, 8, every_sample=True) == 128
    assert max_optimizer_steps(30, 16, epochs=2, batch_size=16) == 60
    assert max_optimizer_steps(3, 10, epochs=1, batch_size=4) == 9
