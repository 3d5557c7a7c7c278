"""Advantage estimators against hand-worked values, loop references and invariances."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf_trainer.algos.advantages import (
    broadcast_to_tokens,
    discounted_returns,
    gae,
    group_advantages,
    whiten,
)
from rlhf_trainer.algos.masking import (
    masked_mean,
    masked_moments,
    masked_var,
    mean_var_from_moments,
)

from . import reference

# One response of three real tokens: rewards [1, 0, 2], values [0.5, 1, 0], worked by hand:
# gamma = lam = 0.5: deltas 1 + 0.5 * 1 - 0.5 = 1, 0 + 0 - 1 = -1, 2 - 0 = 2;
# A_2 = 2, A_1 = -1 + 0.25 * 2 = -0.5, A_0 = 1 + 0.25 * (-0.5) = 0.875.
R = [1.0, 0.0, 2.0]
V = [0.5, 1.0, 0.0]
GAE_HAND_CASES = [
    pytest.param(0.5, 0.5, [0.875, -0.5, 2.0], id="gamma0.5-lam0.5"),
    pytest.param(0.0, 0.0, [0.5, -1.0, 2.0], id="gamma0-lam0-reward-minus-value"),
    pytest.param(0.0, 1.0, [0.5, -1.0, 2.0], id="gamma0-lam1-reward-minus-value"),
    pytest.param(0.5, 0.0, [1.0, -1.0, 2.0], id="gamma0.5-lam0-td-error"),
    pytest.param(1.0, 0.0, [1.5, -1.0, 2.0], id="gamma1-lam0-td-error"),
    pytest.param(1.0, 1.0, [2.5, 1.0, 2.0], id="gamma1-lam1-return-minus-value"),
]


@pytest.mark.parametrize(("gamma", "lam", "expected"), GAE_HAND_CASES)
@pytest.mark.parametrize(
    ("layout", "mask"),
    [
        pytest.param([0, 1, 2], [1, 1, 1], id="no-padding"),
        pytest.param([0, 2, 3], [1, 0, 1, 1], id="padding-in-middle"),
        pytest.param([0, 1, 2], [1, 1, 1, 0, 0], id="padding-at-end"),
        pytest.param([1, 2, 4], [0, 1, 1, 0, 1, 0], id="padding-everywhere"),
    ],
)
def test_gae_hand_worked(
    gamma: float, lam: float, expected: list[float], layout: list[int], mask: list[int]
) -> None:
    # Padding positions get garbage (99) that must be ignored.
    rewards = torch.full((1, len(mask)), 99.0, dtype=torch.float64)
    values = torch.full((1, len(mask)), 99.0, dtype=torch.float64)
    want_adv = torch.zeros(1, len(mask), dtype=torch.float64)
    want_ret = torch.zeros(1, len(mask), dtype=torch.float64)
    for i, t in enumerate(layout):
        rewards[0, t], values[0, t] = R[i], V[i]
        want_adv[0, t], want_ret[0, t] = expected[i], expected[i] + V[i]
    advantages, returns = gae(rewards, values, torch.tensor([mask]), gamma, lam)
    torch.testing.assert_close(advantages, want_adv)
    torch.testing.assert_close(returns, want_ret)


MASKS = {
    "no-padding": [1, 1, 1, 1, 1, 1],
    "end": [1, 1, 1, 1, 0, 0],
    "middle": [1, 1, 0, 0, 1, 1],
    "middle-and-end": [1, 0, 1, 1, 0, 0],
    "single-token": [1, 0, 0, 0, 0, 0],
    "empty": [0, 0, 0, 0, 0, 0],
}
GAMMA_LAMBDA = [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0), (0.99, 0.95), (0.5, 0.3)]


def _random_batch(seed: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.tensor(list(MASKS.values()))
    rewards = torch.randn(mask.shape, generator=generator, dtype=dtype)
    values = torch.randn(mask.shape, generator=generator, dtype=dtype)
    return rewards, values, mask


@pytest.mark.parametrize(("gamma", "lam"), GAMMA_LAMBDA, ids=lambda v: f"{v}")
def test_gae_matches_loop_reference_on_every_mask_layout(gamma: float, lam: float) -> None:
    rewards, values, mask = _random_batch(seed=1)
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    for row, name in enumerate(MASKS):
        want_adv, want_ret = reference.gae_row(
            rewards[row].tolist(), values[row].tolist(), mask[row].tolist(), gamma, lam
        )
        assert advantages[row].tolist() == pytest.approx(want_adv, abs=1e-12), name
        assert returns[row].tolist() == pytest.approx(want_ret, abs=1e-12), name


def test_gae_lambda1_gamma1_is_return_minus_value() -> None:
    rewards, values, mask = _random_batch(seed=2)
    advantages, _ = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    masked_rewards = torch.where(mask.bool(), rewards, 0.0)
    reward_to_go = masked_rewards.flip(-1).cumsum(-1).flip(-1)
    torch.testing.assert_close(advantages, torch.where(mask.bool(), reward_to_go - values, 0.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gae_keeps_dtype_detaches_and_leaves_inputs_alone(dtype: torch.dtype) -> None:
    rewards, values, mask = _random_batch(seed=3, dtype=dtype)
    values.requires_grad_(True)
    before = (rewards.clone(), values.detach().clone(), mask.clone())
    advantages, returns = gae(rewards, values, mask, 0.99, 0.95)
    assert advantages.dtype == returns.dtype == dtype
    assert not advantages.requires_grad and not returns.requires_grad
    for tensor, copy in zip((rewards, values.detach(), mask), before, strict=True):
        assert torch.equal(tensor, copy)


def test_gae_ignores_non_finite_padding() -> None:
    rewards = torch.tensor([[1.0, math.nan, 2.0, math.inf]])
    values = torch.tensor([[0.5, math.nan, 0.0, -math.inf]])
    advantages, returns = gae(rewards, values, torch.tensor([[1, 0, 1, 0]]), 1.0, 1.0)
    torch.testing.assert_close(advantages, torch.tensor([[2.5, 0.0, 2.0, 0.0]]))
    torch.testing.assert_close(returns, torch.tensor([[3.0, 0.0, 2.0, 0.0]]))


@pytest.mark.parametrize(
    ("gamma", "expected"),
    [
        pytest.param(0.0, [1.0, 0.0, 2.0], id="gamma0-immediate-reward"),
        pytest.param(0.5, [1.5, 1.0, 2.0], id="gamma0.5"),
        pytest.param(1.0, [3.0, 2.0, 2.0], id="gamma1-reward-to-go"),
    ],
)
def test_discounted_returns_hand_worked_with_middle_padding(
    gamma: float, expected: list[float]
) -> None:
    rewards = torch.tensor([[1.0, 7.0, 0.0, 2.0, 7.0]])
    mask = torch.tensor([[1, 0, 1, 1, 0]])
    result = discounted_returns(rewards, mask, gamma)
    torch.testing.assert_close(
        result, torch.tensor([[expected[0], 0, expected[1], expected[2], 0]])
    )


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.99, 1.0])
def test_discounted_returns_match_loop_reference(gamma: float) -> None:
    rewards, _, mask = _random_batch(seed=4)
    result = discounted_returns(rewards, mask, gamma)
    for row in range(mask.shape[0]):
        want = reference.discounted_returns_row(rewards[row].tolist(), mask[row].tolist(), gamma)
        assert result[row].tolist() == pytest.approx(want, abs=1e-12)


def test_discounted_returns_gamma1_minus_values_equals_gae_lambda1() -> None:
    rewards, values, mask = _random_batch(seed=5)
    advantages, _ = gae(rewards, values, mask, 1.0, 1.0)
    returns = discounted_returns(rewards, mask, 1.0)
    torch.testing.assert_close(advantages, torch.where(mask.bool(), returns - values, 0.0))


# scores [1, 0, 1, 1] in groups of 2: group means 0.5 and 1, stds sqrt(0.5) and 0.
GROUP_HAND_CASES = [
    pytest.param("grpo", [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5), 0.0, 0.0], id="grpo"),
    pytest.param("dr_grpo", [0.5, -0.5, 0.0, 0.0], id="dr_grpo"),
    pytest.param("rloo", [1.0, -1.0, 0.0, 0.0], id="rloo"),
    pytest.param("reinforce_baseline", [0.5, -0.5, 0.0, 0.0], id="reinforce_baseline"),
]


@pytest.mark.parametrize(("method", "expected"), GROUP_HAND_CASES)
def test_group_advantages_hand_worked_group_of_2(method: str, expected: list[float]) -> None:
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    result = group_advantages(
        scores, group_size=2, method=method, eps=0.0 if method != "grpo" else 1e-12
    )
    torch.testing.assert_close(
        result, torch.tensor(expected, dtype=torch.float64), rtol=1e-9, atol=1e-9
    )


@pytest.mark.parametrize("method", ["grpo", "dr_grpo", "rloo", "reinforce_baseline"])
@pytest.mark.parametrize("group_size", [2, 8])
def test_group_advantages_match_loop_reference(method: str, group_size: int) -> None:
    scores = torch.randn(4 * group_size, generator=torch.Generator().manual_seed(6)).double()
    result = group_advantages(scores, group_size, method, eps=1e-6)
    want = reference.group_advantages_list(scores.tolist(), group_size, method, eps=1e-6)
    assert result.tolist() == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("group_size", [2, 8])
def test_rloo_equals_closed_form(group_size: int) -> None:
    scores = torch.randn(3 * group_size, generator=torch.Generator().manual_seed(7)).double()
    groups = scores.reshape(-1, group_size)
    closed_form = group_size / (group_size - 1) * (groups - groups.mean(-1, keepdim=True))
    torch.testing.assert_close(
        group_advantages(scores, group_size, "rloo"), closed_form.reshape(-1)
    )


def test_grpo_equal_scores_give_zero_not_nan() -> None:
    result = group_advantages(torch.ones(8), 8, "grpo")
    assert torch.equal(result, torch.zeros(8))


def test_group_advantages_are_detached_targets() -> None:
    scores = torch.randn(8, requires_grad=True)
    assert not group_advantages(scores, 4, "grpo").requires_grad


@settings(max_examples=40, deadline=None)
@given(
    group_size=st.sampled_from([2, 3, 8]),
    n_groups=st.integers(1, 4),
    method=st.sampled_from(["grpo", "dr_grpo", "rloo", "reinforce_baseline"]),
    seed=st.integers(0, 2**16),
    shift=st.floats(-50, 50),
)
def test_shifting_a_group_by_a_constant_changes_no_advantage(
    group_size: int, n_groups: int, method: str, seed: int, shift: float
) -> None:
    scores = torch.randn(n_groups * group_size, generator=torch.Generator().manual_seed(seed))
    scores = scores.double()
    shifted = scores.clone()
    shifted[:group_size] += shift  # only the first group moves
    torch.testing.assert_close(
        group_advantages(shifted, group_size, method),
        group_advantages(scores, group_size, method),
        rtol=1e-9,
        atol=1e-9,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"group_size": 3}, "not a multiple of group_size 3", id="not-a-multiple"),
        pytest.param({"group_size": 1}, "group_size must be an integer >= 2", id="group-of-1"),
        pytest.param({"group_size": 2.0}, "group_size must be an integer", id="float-group-size"),
        pytest.param({"method": "ppo"}, "method must be one of 'grpo'", id="unknown-method"),
        pytest.param({"scores": torch.ones(2, 4)}, r"scores must have 1 dimension", id="2d-scores"),
        pytest.param(
            {"scores": torch.ones(8, dtype=torch.long)},
            "scores must be a floating",
            id="int-scores",
        ),
        pytest.param({"eps": -1.0}, r"eps must be in \[0, inf\)", id="negative-eps"),
    ],
)
def test_group_advantages_errors(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"scores": torch.ones(8), "group_size": 2, "method": "grpo"}
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        group_advantages(**arguments)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda r, v, m: gae(r, v, m, 1.5, 0.9), id="gamma-above-1"),
        pytest.param(lambda r, v, m: gae(r, v, m, 0.9, -0.1), id="negative-lambda"),
        pytest.param(lambda r, v, m: gae(r, v[:, :-1], m, 1.0, 1.0), id="values-shape"),
        pytest.param(lambda r, v, m: gae(r[0], v[0], m[0], 1.0, 1.0), id="1d-rewards"),
        pytest.param(lambda r, v, m: gae(r, v, m[:, :-1], 1.0, 1.0), id="mask-shape"),
        pytest.param(lambda r, v, m: gae(r.long(), v, m, 1.0, 1.0), id="int-rewards"),
        pytest.param(lambda r, v, m: discounted_returns(r, m, -0.5), id="returns-negative-gamma"),
    ],
)
def test_gae_and_returns_errors_name_the_argument(
    call: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], object],
) -> None:
    rewards, values, mask = _random_batch(seed=8)
    with pytest.raises(ValueError, match=r"^(gamma|lam|values|rewards|mask) "):
        call(rewards, values, mask)


def test_broadcast_to_tokens() -> None:
    result = broadcast_to_tokens(torch.tensor([2.0, -1.0]), torch.tensor([[1, 0, 1], [1, 1, 0]]))
    torch.testing.assert_close(result, torch.tensor([[2.0, 0.0, 2.0], [-1.0, -1.0, 0.0]]))
    with pytest.raises(ValueError, match="mask has 3 rows but sequence_values has 2"):
        broadcast_to_tokens(torch.ones(2), torch.ones(3, 4))


def test_whiten_hand_worked() -> None:
    x = torch.tensor([[1.0, 100.0, 3.0], [5.0, 7.0, -100.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 1], [1, 1, 0]])
    # real values 1, 3, 5, 7: mean 4, population variance (9 + 1 + 1 + 9) / 4 = 5.
    scale = 1 / math.sqrt(5.0)
    expected = torch.tensor([[-3 * scale, 0, -scale], [scale, 3 * scale, 0]], dtype=torch.float64)
    torch.testing.assert_close(whiten(x, mask, eps=0.0), expected)
    torch.testing.assert_close(
        whiten(x, mask, shift_mean=False, eps=0.0), torch.where(mask.bool(), expected + 4.0, 0.0)
    )


def test_whiten_with_global_statistics_equals_whitening_the_whole_batch() -> None:
    """Two 'ranks' each whiten their half with all-reduced statistics."""
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(9))
    mask = torch.rand(8, 6, generator=torch.Generator().manual_seed(10)) > 0.25
    halves = [(x[:4], mask[:4]), (x[4:], mask[4:])]
    moments = [masked_moments(part, part_mask) for part, part_mask in halves]
    total, total_sq, count = (a + b for a, b in zip(*moments, strict=True))
    mean, var = mean_var_from_moments(total, total_sq, count)
    per_rank = [whiten(part, part_mask, mean=mean, var=var) for part, part_mask in halves]
    torch.testing.assert_close(torch.cat(per_rank), whiten(x, mask), rtol=1e-5, atol=1e-5)
    assert per_rank[0].dtype == torch.float32  # float64 statistics do not upcast the result


def test_whiten_needs_both_statistics() -> None:
    with pytest.raises(ValueError, match="mean and var must be given together"):
        whiten(torch.ones(2, 2), torch.ones(2, 2), mean=0.0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.floats(0.01, 100), offset=st.floats(-100, 100))
def test_whitened_values_have_zero_mean_and_unit_variance(
    seed: int, scale: float, offset: float
) -> None:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 7, generator=generator, dtype=torch.float64) * scale + offset
    mask = torch.rand(4, 7, generator=generator) > 0.3
    mask[0, 0] = mask[1, 1] = True  # at least two real values
    result = whiten(x, mask, eps=0.0)
    assert masked_mean(result, mask).item() == pytest.approx(0.0, abs=1e-9)
    assert masked_var(result, mask).item() == pytest.approx(1.0, rel=1e-9)
    assert torch.all(result[~mask] == 0)
