"""Policy, value, entropy, SFT, reward-model and preference losses."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf_trainer.algos.losses import (
    aggregate_loss,
    dpo_loss,
    entropy_from_logits,
    kto_loss,
    log_probs_and_entropy,
    log_probs_from_logits,
    pairwise_rm_loss,
    ppo_policy_loss,
    sequence_logps,
    sft_loss,
    value_loss,
)

from . import reference

AGGREGATIONS = [
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
]

# Row 0: three real tokens; row 1: one real token then padding; row 2: empty.
LOSS_MAT = torch.tensor([[1.0, 2.0, 3.0], [4.0, 50.0, 60.0], [7.0, 8.0, 9.0]])
LOSS_MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize(
    ("aggregation", "norm_length", "expected"),
    [
        pytest.param("token-mean", None, (1 + 2 + 3 + 4) / 4, id="token-mean"),
        pytest.param("seq-mean-token-mean", None, (2 + 4) / 2, id="seq-mean-token-mean"),
        pytest.param("seq-mean-token-sum", None, (6 + 4) / 2, id="seq-mean-token-sum"),
        pytest.param("seq-mean-token-sum-norm", None, (6 / 3 + 4 / 3) / 2, id="sum-norm-default-T"),
        pytest.param("seq-mean-token-sum-norm", 10.0, (0.6 + 0.4) / 2, id="sum-norm-constant"),
    ],
)
def test_aggregate_loss_hand_worked(
    aggregation: str, norm_length: float | None, expected: float
) -> None:
    result = aggregate_loss(LOSS_MAT, LOSS_MASK, aggregation, norm_length=norm_length)
    assert result.item() == pytest.approx(expected)


# Single-token PPO cases: (advantage, ratio, clip_low, clip_high, dual_clip) -> loss, clipped?
PPO_HAND_CASES = [
    pytest.param(1.0, 1.5, 0.2, 0.2, None, -1.2, 1.0, 0.0, id="pos-adv-ratio-above-clipped"),
    pytest.param(1.0, 0.5, 0.2, 0.2, None, -0.5, 0.0, 0.0, id="pos-adv-ratio-below-unclipped"),
    pytest.param(-1.0, 1.5, 0.2, 0.2, None, 1.5, 0.0, 0.0, id="neg-adv-ratio-above-unclipped"),
    pytest.param(-1.0, 0.5, 0.2, 0.2, None, 0.8, 1.0, 0.0, id="neg-adv-ratio-below-clipped"),
    pytest.param(1.0, 1.5, 0.2, 0.28, None, -1.28, 1.0, 0.0, id="clip-higher"),
    pytest.param(-1.0, 5.0, 0.2, 0.2, None, 5.0, 0.0, 0.0, id="neg-adv-huge-ratio"),
    pytest.param(-1.0, 5.0, 0.2, 0.2, 3.0, 3.0, 0.0, 1.0, id="dual-clip-caps"),
    pytest.param(-1.0, 1.5, 0.2, 0.2, 3.0, 1.5, 0.0, 0.0, id="dual-clip-inactive"),
    pytest.param(2.0, 5.0, 0.2, 0.2, 3.0, -2.4, 1.0, 0.0, id="dual-clip-ignores-pos-adv"),
    pytest.param(0.5, 1.0, 0.2, 0.2, None, -0.5, 0.0, 0.0, id="ratio-one"),
]


@pytest.mark.parametrize(
    ("advantage", "ratio", "clip_low", "clip_high", "dual_clip", "loss", "clip_frac", "dual_frac"),
    PPO_HAND_CASES,
)
def test_ppo_policy_loss_hand_worked(
    advantage: float,
    ratio: float,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
    loss: float,
    clip_frac: float,
    dual_frac: float,
) -> None:
    old_logp = torch.tensor([[-1.0]], dtype=torch.float64)
    logp = old_logp + math.log(ratio)
    result, stats = ppo_policy_loss(
        logp,
        old_logp,
        torch.tensor([[advantage]]).double(),
        torch.ones(1, 1),
        clip_low,
        clip_high,
        dual_clip,
    )
    assert result.item() == pytest.approx(loss, rel=1e-12)
    assert stats["clip_frac"].item() == clip_frac
    assert stats["dual_clip_frac"].item() == dual_frac
    assert stats["approx_kl"].item() == pytest.approx(-math.log(ratio), rel=1e-12)


def _ppo_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    old_logp = -torch.rand(4, 6, generator=generator, dtype=torch.float64) * 3
    logp = old_logp + torch.randn(4, 6, generator=generator, dtype=torch.float64) * 0.4
    advantages = torch.randn(4, 6, generator=generator, dtype=torch.float64)
    mask = torch.tensor(
        [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0]]
    )
    return logp, old_logp, advantages, mask


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("dual_clip", [None, 3.0], ids=["no-dual-clip", "dual-clip-3"])
def test_ppo_policy_loss_matches_loop_reference(aggregation: str, dual_clip: float | None) -> None:
    logp, old_logp, advantages, mask = _ppo_batch(seed=0)
    # Padding holds -inf log-probs, as a masked log-softmax can produce.
    logp = torch.where(mask.bool(), logp, -math.inf)
    loss, _ = ppo_policy_loss(logp, old_logp, advantages, mask, 0.2, 0.28, dual_clip, aggregation)
    token_losses = [
        [
            reference.ppo_token_loss(lp, olp, a, 0.2, 0.28, dual_clip) if m else 0.0
            for lp, olp, a, m in zip(*rows, strict=True)
        ]
        for rows in zip(
            logp.tolist(), old_logp.tolist(), advantages.tolist(), mask.tolist(), strict=True
        )
    ]
    want = reference.aggregate(token_losses, mask.tolist(), aggregation)
    assert loss.item() == pytest.approx(want, rel=1e-12)


def test_ppo_gradient_flows_into_logp_only() -> None:
    logp, old_logp, advantages, mask = _ppo_batch(seed=1)
    logp.requires_grad_(True)
    old_logp.requires_grad_(True)
    advantages.requires_grad_(True)
    loss, stats = ppo_policy_loss(logp, old_logp, advantages, mask)
    loss.backward()
    assert old_logp.grad is None and advantages.grad is None
    assert logp.grad is not None and torch.isfinite(logp.grad).all()
    assert torch.all(logp.grad[~mask.bool()] == 0)
    assert all(not value.requires_grad for value in stats.values())


def test_ppo_gradient_is_cut_where_clipped_and_is_minus_a_ratio_elsewhere() -> None:
    old_logp = torch.zeros(1, 4, dtype=torch.float64)
    ratios = torch.tensor([[1.5, 0.5, 1.1, 0.7]], dtype=torch.float64)
    advantages = torch.tensor([[1.0, -1.0, 1.0, 1.0]], dtype=torch.float64)
    logp = ratios.log().requires_grad_(True)
    loss, _ = ppo_policy_loss(logp, old_logp, advantages, torch.ones(1, 4))
    loss.backward()
    # d(-A * ratio)/dlogp = -A * ratio, over 4 tokens; tokens 0 and 1 are clipped (no gradient).
    expected = torch.tensor([[0.0, 0.0, -1.1 / 4, -0.7 / 4]], dtype=torch.float64)
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, expected)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), aggregation=st.sampled_from(AGGREGATIONS))
def test_on_policy_ppo_loss_is_minus_the_aggregated_advantage(seed: int, aggregation: str) -> None:
    _, old_logp, advantages, mask = _ppo_batch(seed)
    loss, stats = ppo_policy_loss(
        old_logp.clone(), old_logp, advantages, mask, aggregation=aggregation
    )
    torch.testing.assert_close(loss, aggregate_loss(-advantages, mask, aggregation))
    assert stats["clip_frac"].item() == 0 and stats["approx_kl"].item() == 0


@pytest.mark.parametrize(
    ("values", "clip", "loss", "clip_frac"),
    [
        # old value 1, return 2.
        pytest.param(1.5, None, 0.5 * 0.5**2, 0.0, id="unclipped"),
        pytest.param(1.5, 0.2, 0.5 * 0.8**2, 1.0, id="clip-moved-too-far-towards-return"),
        pytest.param(0.9, 0.2, 0.5 * 1.1**2, 0.0, id="inside-clip-range"),
        pytest.param(2.5, 0.2, 0.5 * 0.8**2, 1.0, id="overshoot-clipped-error-larger"),
    ],
)
def test_value_loss_hand_worked(
    values: float, clip: float | None, loss: float, clip_frac: float
) -> None:
    def f64(x: float) -> torch.Tensor:
        return torch.tensor([[x]], dtype=torch.float64)

    result, stats = value_loss(f64(values), f64(1.0), f64(2.0), torch.ones(1, 1), clip=clip)
    assert result.item() == pytest.approx(loss, rel=1e-12)
    assert stats["clip_frac"].item() == clip_frac


def test_value_loss_gradient_flows_into_values_only_and_padding_is_ignored() -> None:
    values = torch.tensor([[1.5, math.nan, 0.5]], requires_grad=True)
    old_values = torch.tensor([[1.0, 0.0, 0.0]], requires_grad=True)
    returns = torch.tensor([[2.0, 0.0, 1.0]], requires_grad=True)
    loss, _ = value_loss(values, old_values, returns, torch.tensor([[1, 0, 1]]), clip=10.0)
    loss.backward()
    assert old_values.grad is None and returns.grad is None
    assert values.grad is not None
    # token-mean of 0.5 * err^2 over 2 tokens: gradient err / 2.
    torch.testing.assert_close(values.grad, torch.tensor([[-0.25, 0.0, -0.25]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_entropy_from_logits_against_definition(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(2)
    logits = (torch.randn(2, 3, 11, generator=generator) * 3).to(dtype)
    mask = torch.tensor([[1, 0, 1], [1, 1, 0]])
    result = entropy_from_logits(logits, mask)
    as_float = logits.float()
    # The definition -sum p log p, a different formula from the implementation's.
    expected = -(torch.softmax(as_float, -1) * torch.log_softmax(as_float, -1)).sum(-1)
    assert result.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    torch.testing.assert_close(result.float(), torch.where(mask.bool(), expected, 0.0))


def test_entropy_extremes() -> None:
    uniform = entropy_from_logits(torch.zeros(1, 1, 16), torch.ones(1, 1))
    assert uniform.item() == pytest.approx(math.log(16))
    peaked = torch.full((1, 1, 16), -1e4)
    peaked[..., 3] = 0
    assert entropy_from_logits(peaked, torch.ones(1, 1)).item() == pytest.approx(0.0, abs=1e-6)


def test_log_probs_from_logits_matches_log_softmax_loop() -> None:
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 4, 7, generator=generator, dtype=torch.float64)
    labels = torch.tensor([[0, 6, 3, -100], [2, 2, 5, 1]])
    result = log_probs_from_logits(logits, labels)
    for b in range(2):
        for t in range(4):
            if labels[b, t] >= 0:
                want = torch.log_softmax(logits[b, t], -1)[labels[b, t]]
                assert result[b, t].item() == pytest.approx(want.item(), rel=1e-12)


@pytest.mark.parametrize("entropy_grad", [False, True], ids=["entropy-statistic", "entropy-bonus"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_log_probs_and_entropy_equal_the_two_functions(
    entropy_grad: bool, dtype: torch.dtype
) -> None:
    """Values, and the gradient of a loss over both (the entropy's only with `entropy_grad`)."""
    generator = torch.Generator().manual_seed(5)
    logits = (torch.randn(2, 4, 7, generator=generator) * 3).to(dtype)
    labels = torch.tensor([[0, 6, 3, -100], [2, 2, 5, 1]])
    mask = labels >= 0
    results = []
    for combined in (True, False):
        z = logits.clone().requires_grad_()
        if combined:
            logp, entropy = log_probs_and_entropy(z, labels, mask, entropy_grad=entropy_grad)
        else:
            logp = log_probs_from_logits(z, labels)
            entropy = entropy_from_logits(z if entropy_grad else z.detach(), mask)
        assert entropy.requires_grad is entropy_grad
        (logp.where(mask, 0.0).sum() + entropy.sum()).backward()
        results.append((logp.where(mask, 0.0), entropy, z.grad))
    # Both compute in fp32; a bf16 gradient of the logits then rounds to one bf16 step.
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    for ours, theirs in zip(*results, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=tolerance, atol=tolerance)
    with pytest.raises(ValueError, match="labels must be an integer tensor of shape"):
        log_probs_and_entropy(logits, labels.float(), mask)


def test_sft_loss_equals_cross_entropy_with_ignored_padding() -> None:
    generator = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 5, 9, generator=generator, requires_grad=True)
    labels = torch.randint(0, 9, (2, 5), generator=generator)
    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]])
    loss = sft_loss(logits, labels, mask)
    expected = F.cross_entropy(
        logits.reshape(-1, 9), torch.where(mask.bool(), labels, -100).reshape(-1)
    )
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert logits.grad is not None and torch.all(logits.grad[0, 2] == 0)


def test_sequence_logps_sum_and_mean() -> None:
    token_logps = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, -9.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    assert sequence_logps(token_logps, mask).tolist() == [-3.0, -4.0]
    assert sequence_logps(token_logps, mask, average=True).tolist() == [-1.5, -2.0]


@pytest.mark.parametrize(
    ("chosen", "rejected", "margin", "expected"),
    [
        pytest.param(1.0, 0.0, None, -reference.log_sigmoid(1.0), id="chosen-ahead"),
        pytest.param(0.0, 0.0, None, math.log(2.0), id="tie-is-log2"),
        pytest.param(0.0, 2.0, None, -reference.log_sigmoid(-2.0), id="rejected-ahead"),
        pytest.param(1.0, 0.0, 1.0, math.log(2.0), id="margin-eats-the-gap"),
        pytest.param(30.0, -30.0, None, -reference.log_sigmoid(60.0), id="large-gap-stable"),
    ],
)
def test_pairwise_rm_loss_hand_worked(
    chosen: float, rejected: float, margin: float | None, expected: float
) -> None:
    result = pairwise_rm_loss(
        torch.tensor([chosen]).double(), torch.tensor([rejected]).double(), margin
    )
    assert result.item() == pytest.approx(expected, rel=1e-12)


def test_pairwise_rm_loss_per_pair_margin_and_gradient() -> None:
    chosen = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    rejected = torch.tensor([0.0, 0.0], dtype=torch.float64, requires_grad=True)
    loss = pairwise_rm_loss(chosen, rejected, margin=torch.tensor([1.0, 0.0]).double())
    assert loss.item() == pytest.approx(math.log(2.0))
    loss.backward()
    assert chosen.grad is not None and rejected.grad is not None
    torch.testing.assert_close(chosen.grad, torch.tensor([-0.25, -0.25]).double())
    torch.testing.assert_close(rejected.grad, -chosen.grad)


# policy chosen -1, rejected -2, reference both -1.5: h = 1, beta 0.1.
DPO_HAND_CASES = [
    pytest.param("dpo", 0.0, -reference.log_sigmoid(0.1), id="dpo"),
    pytest.param(
        "dpo", 0.1, -0.9 * reference.log_sigmoid(0.1) - 0.1 * reference.log_sigmoid(-0.1), id="cdpo"
    ),
    pytest.param("ipo", 0.0, (1.0 - 1.0 / 0.2) ** 2, id="ipo"),
]


@pytest.mark.parametrize(("kind", "label_smoothing", "expected"), DPO_HAND_CASES)
def test_dpo_loss_hand_worked(kind: str, label_smoothing: float, expected: float) -> None:
    one = torch.ones(1, dtype=torch.float64)
    losses, chosen_rewards, rejected_rewards = dpo_loss(
        -1.0 * one, -2.0 * one, -1.5 * one, -1.5 * one, 0.1, kind, label_smoothing
    )
    assert losses.shape == (1,)
    assert losses.item() == pytest.approx(expected, rel=1e-12)
    assert chosen_rewards.item() == pytest.approx(0.05)
    assert rejected_rewards.item() == pytest.approx(-0.05)


def test_dpo_gradient_reaches_policy_only_with_the_paper_weight() -> None:
    policy_chosen = torch.tensor([-1.0, -4.0], dtype=torch.float64, requires_grad=True)
    policy_rejected = torch.tensor([-2.0, -1.0], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-1.5, -1.5], dtype=torch.float64, requires_grad=True)
    losses, chosen_rewards, _ = dpo_loss(policy_chosen, policy_rejected, ref, ref, 0.5)
    losses.sum().backward()
    assert ref.grad is None and not chosen_rewards.requires_grad
    # dL/d(policy_chosen) = -beta * sigmoid(-beta * h) (Rafailov et al. 2023, eq. 7).
    h = torch.tensor([1.0, -3.0], dtype=torch.float64)
    assert policy_chosen.grad is not None and policy_rejected.grad is not None
    torch.testing.assert_close(policy_chosen.grad, -0.5 * torch.sigmoid(-0.5 * h))
    torch.testing.assert_close(policy_rejected.grad, -policy_chosen.grad)


@settings(max_examples=40, deadline=None)
@given(st.floats(-20, 20), st.floats(0.01, 1.0), st.floats(0.0, 0.49))
def test_cdpo_is_the_mixture_of_both_preference_directions(
    h: float, beta: float, smoothing: float
) -> None:
    zero = torch.zeros(1, dtype=torch.float64)
    value = torch.tensor([h], dtype=torch.float64)
    forward, _, _ = dpo_loss(value, zero, zero, zero, beta)
    backward, _, _ = dpo_loss(zero, value, zero, zero, beta)
    mixed, _, _ = dpo_loss(value, zero, zero, zero, beta, label_smoothing=smoothing)
    want = (1 - smoothing) * forward + smoothing * backward
    torch.testing.assert_close(mixed, want)


@pytest.mark.parametrize(
    ("desirable", "kl", "weights", "expected"),
    [
        # policy -1, ref -2: implied reward r = 1; beta = 1.
        pytest.param(True, 0.5, (1.0, 1.0), 1 - reference.sigmoid(0.5), id="desirable"),
        pytest.param(False, 0.5, (1.0, 1.0), 1 - reference.sigmoid(-0.5), id="undesirable"),
        pytest.param(
            True, -3.0, (1.0, 1.0), 1 - reference.sigmoid(1.0), id="negative-kl-clamped-to-0"
        ),
        pytest.param(
            True, 0.5, (2.0, 1.0), 2 * (1 - reference.sigmoid(0.5)), id="desirable-weight"
        ),
        pytest.param(
            False, 0.5, (1.0, 1.33), 1.33 * (1 - reference.sigmoid(-0.5)), id="undesirable-weight"
        ),
    ],
)
def test_kto_loss_hand_worked(
    desirable: bool, kl: float, weights: tuple[float, float], expected: float
) -> None:
    losses, rewards = kto_loss(
        torch.tensor([-1.0]).double(),
        torch.tensor([-2.0]).double(),
        torch.tensor([desirable]),
        kl,
        1.0,
        *weights,
    )
    assert losses.item() == pytest.approx(expected, rel=1e-12)
    assert rewards.item() == pytest.approx(1.0)


def test_kto_treats_the_kl_reference_point_as_a_constant() -> None:
    policy = torch.tensor([-1.0, -3.0], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-2.0, -2.0], dtype=torch.float64, requires_grad=True)
    kl = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    losses, _ = kto_loss(policy, ref, torch.tensor([1, 0]), kl, beta=0.5)
    losses.sum().backward()
    assert kl.grad is None and ref.grad is None
    assert policy.grad is not None
    # Desirable: d/dr [1 - s(b(r - z))] = -b s' ; undesirable: d/dr [1 - s(b(z - r))] = +b s'.
    s0 = torch.sigmoid(torch.tensor(0.5 * (1.0 - 0.2), dtype=torch.float64))
    s1 = torch.sigmoid(torch.tensor(0.5 * (0.2 - -1.0), dtype=torch.float64))
    expected = torch.stack([-0.5 * s0 * (1 - s0), 0.5 * s1 * (1 - s1)])
    torch.testing.assert_close(policy.grad, expected)


ONE = torch.ones(1, 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(
            lambda: aggregate_loss(LOSS_MAT, LOSS_MASK, "mean"),
            "aggregation must be one of 'token-mean'",
            id="unknown-aggregation",
        ),
        pytest.param(
            lambda: aggregate_loss(LOSS_MAT, LOSS_MASK, "seq-mean-token-sum-norm", norm_length=0),
            r"norm_length must be in \(0, inf\)",
            id="zero-norm-length",
        ),
        pytest.param(
            lambda: ppo_policy_loss(ONE, ONE, ONE, ONE, clip_low=1.0),
            r"clip_low must be in \[0, 1\)",
            id="clip-low-1",
        ),
        pytest.param(
            lambda: ppo_policy_loss(ONE, ONE, ONE, ONE, clip_high=-0.1),
            r"clip_high must be in \[0, inf\)",
            id="negative-clip-high",
        ),
        pytest.param(
            lambda: ppo_policy_loss(ONE, ONE, ONE, ONE, dual_clip=1.0),
            r"dual_clip must be in \(1, inf\)",
            id="dual-clip-1",
        ),
        pytest.param(
            lambda: ppo_policy_loss(ONE, ONE, torch.ones(1, 2), ONE),
            "advantages must have the same shape as logp",
            id="advantages-shape",
        ),
        pytest.param(
            lambda: ppo_policy_loss(ONE[0], ONE[0], ONE[0], ONE[0]),
            "logp must have 2 dimensions",
            id="1d-logp",
        ),
        pytest.param(
            lambda: value_loss(ONE, ONE, ONE, ONE, clip=0.0),
            r"clip must be in \(0, inf\)",
            id="zero-value-clip",
        ),
        pytest.param(
            lambda: log_probs_from_logits(torch.ones(1, 2, 3), torch.ones(1, 2)),
            "labels must be an integer tensor",
            id="float-labels",
        ),
        pytest.param(
            lambda: pairwise_rm_loss(torch.ones(2), torch.ones(2), torch.ones(3)),
            "margin must be a number",
            id="margin-shape",
        ),
        pytest.param(
            lambda: dpo_loss(*[torch.ones(2)] * 4, beta=0.0),
            r"beta must be in \(0, inf\)",
            id="zero-beta",
        ),
        pytest.param(
            lambda: dpo_loss(*[torch.ones(2)] * 4, beta=0.1, kind="simpo"),
            "kind must be one of 'dpo', 'ipo'",
            id="unknown-kind",
        ),
        pytest.param(
            lambda: dpo_loss(*[torch.ones(2)] * 4, beta=0.1, label_smoothing=0.5),
            r"label_smoothing must be in \[0, 0.5\)",
            id="smoothing-half",
        ),
        pytest.param(
            lambda: dpo_loss(*[torch.ones(2)] * 4, beta=0.1, kind="ipo", label_smoothing=0.1),
            "label_smoothing applies to kind='dpo'",
            id="ipo-smoothing",
        ),
        pytest.param(
            lambda: kto_loss(torch.ones(2), torch.ones(2), torch.ones(2), torch.ones(2), 0.1),
            "kl_estimate must be a single number",
            id="kto-vector-kl",
        ),
        pytest.param(
            lambda: kto_loss(torch.ones(2), torch.ones(3), torch.ones(2), 0.0, 0.1),
            "ref_logps must have the same shape",
            id="kto-shape",
        ),
    ],
)
def test_errors_name_the_argument(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
