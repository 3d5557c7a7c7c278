"""Reward shaping, clipping, DAPO overlong penalty and running normalisation."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf_trainer.algos.rewards import (
    RunningMeanStd,
    clip_rewards,
    overlong_penalty,
    shape_token_rewards,
)

SCORE = torch.tensor([2.0, -1.0, 5.0], dtype=torch.float64)
KL = torch.tensor(
    [[0.1, 0.2, 0.3, 0.4], [0.5, 9.0, 0.5, 9.0], [0.1, 0.1, 0.1, 0.1]], dtype=torch.float64
)
MASK = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize(
    ("kl_coef", "expected"),
    [
        pytest.param(
            0.1,
            [[-0.01, -0.02 + 2.0, 0, 0], [-0.05, 0, -0.05 - 1.0, 0], [0, 0, 0, 0]],
            id="kl-on-every-token-score-on-last",
        ),
        pytest.param(
            0.0, [[0, 2.0, 0, 0], [0, 0, -1.0, 0], [0, 0, 0, 0]], id="kl-coef-0-score-only"
        ),
    ],
)
def test_shape_token_rewards_hand_worked(kl_coef: float, expected: list[list[float]]) -> None:
    # Row 0 pads at the end, row 1 in the middle and at the end, row 2 has no real token.
    result = shape_token_rewards(SCORE, KL, MASK, kl_coef)
    torch.testing.assert_close(result, torch.tensor(expected, dtype=torch.float64))


def test_shaped_rewards_sum_to_score_minus_total_kl() -> None:
    generator = torch.Generator().manual_seed(0)
    kl = torch.rand(4, 9, generator=generator)
    mask = torch.rand(4, 9, generator=generator) > 0.3
    mask[:, 0] = True
    score = torch.randn(4, generator=generator)
    rewards = shape_token_rewards(score, kl, mask, kl_coef=0.05)
    torch.testing.assert_close(rewards.sum(-1), score - 0.05 * (kl * mask).sum(-1))


def test_shaped_rewards_are_detached() -> None:
    kl = KL.clone().requires_grad_(True)
    score = SCORE.clone().requires_grad_(True)
    assert not shape_token_rewards(score, kl, MASK, 0.1).requires_grad


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(
            lambda: shape_token_rewards(SCORE[:2], KL, MASK, 0.1),
            "score has 2 entries but kl has 3 rows",
            id="score-rows",
        ),
        pytest.param(
            lambda: shape_token_rewards(SCORE, KL, MASK, -0.1),
            r"kl_coef must be in \[0, inf\)",
            id="negative-coef",
        ),
        pytest.param(
            lambda: shape_token_rewards(SCORE, KL[0], MASK[0], 0.1),
            "kl must have 2 dimensions",
            id="1d-kl",
        ),
        pytest.param(
            lambda: clip_rewards(SCORE, 0.0), r"limit must be in \(0, inf\)", id="zero-clip"
        ),
        pytest.param(
            lambda: overlong_penalty(torch.tensor([5]), 100, 0),
            r"buffer_length must be in \(0, 100\]",
            id="zero-buffer",
        ),
        pytest.param(
            lambda: overlong_penalty(torch.tensor([5]), 100, 101),
            r"buffer_length must be in \(0, 100\]",
            id="buffer-over-max",
        ),
        pytest.param(
            lambda: overlong_penalty(torch.tensor([5]), 100, 10, -1.0),
            "penalty_factor must be",
            id="negative-factor",
        ),
        pytest.param(
            lambda: overlong_penalty(torch.tensor([5]), 100, 10, dtype=torch.int64),
            "dtype must be a floating",
            id="int-dtype",
        ),
        pytest.param(
            lambda: RunningMeanStd().load_state_dict({"mean": torch.zeros(())}),
            r"missing \['count', 'var'\]",
            id="bad-state",
        ),
    ],
)
def test_errors_name_the_argument(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        pytest.param(1.0, [-1.0, -0.5, 0.0, 1.0], id="limit-1"),
        pytest.param(10.0, [-3.0, -0.5, 0.0, 2.0], id="limit-above-all"),
    ],
)
def test_clip_rewards(limit: float, expected: list[float]) -> None:
    rewards = torch.tensor([-3.0, -0.5, 0.0, 2.0])
    assert clip_rewards(rewards, limit).tolist() == expected
    assert rewards.tolist() == [-3.0, -0.5, 0.0, 2.0]


@pytest.mark.parametrize(
    ("length", "factor", "expected"),
    [
        # L_max = 100, L_cache = 20: no penalty up to 80, linear to -1 at 100, -1 beyond.
        pytest.param(50, 1.0, 0.0, id="short"),
        pytest.param(80, 1.0, 0.0, id="buffer-start"),
        pytest.param(90, 1.0, -0.5, id="half-into-buffer"),
        pytest.param(100, 1.0, -1.0, id="at-limit"),
        pytest.param(120, 1.0, -1.0, id="beyond-limit"),
        pytest.param(90, 0.5, -0.25, id="factor-scales"),
    ],
)
def test_overlong_penalty_follows_dapo(length: int, factor: float, expected: float) -> None:
    result = overlong_penalty(torch.tensor([length]), 100, 20, penalty_factor=factor)
    assert result.dtype == torch.float32
    assert result.item() == pytest.approx(expected)


def test_overlong_penalty_from_a_mask() -> None:
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    result = overlong_penalty(mask.sum(-1), 4, 2, dtype=torch.float64)
    torch.testing.assert_close(result, torch.tensor([-1.0, 0.0], dtype=torch.float64))


def test_running_mean_std_merges_batches_exactly() -> None:
    generator = torch.Generator().manual_seed(1)
    batches = [torch.randn(n, generator=generator) * 3 + 1 for n in (1, 7, 16, 3)]
    stats = RunningMeanStd()
    for batch in batches:
        stats.update(batch)
    everything = torch.cat(batches).double()
    torch.testing.assert_close(stats.mean, everything.mean())
    torch.testing.assert_close(stats.var, everything.var(unbiased=False))
    assert stats.count.item() == 27


def test_running_mean_std_with_mask_and_empty_batches() -> None:
    stats = RunningMeanStd()
    stats.update(torch.tensor([1.0, 2.0]), mask=torch.tensor([False, False]))
    assert (stats.mean.item(), stats.var.item(), stats.count.item()) == (0.0, 1.0, 0.0)
    stats.update(torch.tensor([[1.0, 99.0], [3.0, 5.0]]), mask=torch.tensor([[1, 0], [1, 1]]))
    stats.update(torch.tensor([]))
    assert stats.mean.item() == pytest.approx(3.0)
    assert stats.var.item() == pytest.approx(8 / 3)


def test_running_normalize_and_state_round_trip() -> None:
    stats = RunningMeanStd(eps=0.0)
    stats.update(torch.tensor([0.0, 4.0]))  # mean 2, var 4, std 2
    values = torch.tensor([2.0, 6.0, 100.0])
    assert stats.normalize(values).tolist() == [0.0, 2.0, 49.0]
    assert stats.normalize(values, shift_mean=False).tolist() == [1.0, 3.0, 50.0]
    assert stats.normalize(values, clip=5.0).tolist() == [0.0, 2.0, 5.0]
    assert values.tolist() == [2.0, 6.0, 100.0]
    restored = RunningMeanStd(eps=0.0)
    restored.load_state_dict(stats.state_dict())
    assert restored.normalize(values).tolist() == [0.0, 2.0, 49.0]


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=5),
)
def test_running_stats_do_not_depend_on_how_the_data_is_split(
    values: list[float], cuts: list[int]
) -> None:
    data = torch.tensor(values, dtype=torch.float64)
    bounds = [0, *sorted(c for c in cuts if c <= len(values)), len(values)]
    stats = RunningMeanStd()
    for start, stop in itertools.pairwise(bounds):
        stats.update(data[start:stop])
    assert stats.mean.item() == pytest.approx(data.mean().item(), abs=1e-9)
    assert stats.var.item() == pytest.approx(data.var(unbiased=False).item(), rel=1e-9, abs=1e-6)
