"""Rollout correction, GSPO and CISPO against straightforward per-row implementations.

The batches are random and padded anywhere (a full row, an empty row, holes in the middle),
with garbage in the padding (-inf, NaN, huge values) that must not reach a value or a
gradient. The references loop over each row's real tokens with scalar torch ops, so autograd
gives reference gradients that share nothing with the vectorised code.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from rlhf_trainer.algos.losses import cispo_policy_loss, gspo_policy_loss, ppo_policy_loss
from rlhf_trainer.algos.rewards import rollout_correction

B, T = 7, 9
GARBAGE = (-math.inf, math.nan, 1e6, -1e6, math.inf)


def _with_garbage(x: Tensor, mask: Tensor) -> Tensor:
    junk = torch.tensor(GARBAGE, dtype=x.dtype).repeat(x.numel() // len(GARBAGE) + 1)
    return torch.where(mask, x, junk[: x.numel()].reshape(x.shape))


def padded_batch(seed: int) -> dict[str, Tensor]:
    """Log-probs of a trainer, an engine and an updated policy, with per-row drift scales."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, T, generator=g) > 0.35
    mask[0] = True  # a full row
    mask[1] = False  # a row without a real token
    mask[2, 3:6] = False  # a hole in the middle
    # Per row, how far the policies drift apart: none, tiny, moderate, large.
    scale = torch.tensor([0.0, 1e-5, 3e-4, 0.01, 0.1, 0.5, 1.5], dtype=torch.float64)[:, None]
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 4
    rollout = old + scale * torch.randn(B, T, generator=g, dtype=torch.float64)
    logp = old + scale * torch.randn(B, T, generator=g, dtype=torch.float64)
    seq_adv = torch.randn(B, generator=g, dtype=torch.float64)
    token_adv = torch.randn(B, T, generator=g, dtype=torch.float64)
    return {
        "mask": mask,
        "old": _with_garbage(old, mask),
        "rollout": _with_garbage(rollout, mask),
        "logp": _with_garbage(logp, mask),
        "seq_adv": seq_adv,
        "seq_adv_bt": _with_garbage(seq_adv[:, None].expand(B, T), mask),
        "token_adv": _with_garbage(token_adv, mask),
    }


def _rows(mask: Tensor) -> list[list[int]]:
    return [[t for t in range(mask.shape[1]) if mask[i, t]] for i in range(mask.shape[0])]


# --- references --------------------------------------------------------------------------


def rollout_correction_reference(
    old: Tensor, rollout: Tensor, mask: Tensor, mode: str, level: str, upper: float, lower: float
) -> tuple[list[list[float]], list[list[bool]], dict[str, float]]:
    weights = [[0.0] * T for _ in range(B)]
    keep = [[False] * T for _ in range(B)]
    rhos, k3s, dropped, truncated = [], [], 0, 0
    for i, positions in enumerate(_rows(mask)):
        token_rho = {t: math.exp(float(old[i, t] - rollout[i, t])) for t in positions}
        seq_rho = math.exp(sum(math.log(r) for r in token_rho.values()))
        for t in positions:
            rho = token_rho[t] if level == "token" else seq_rho
            rhos.append(rho)
            k3s.append(token_rho[t] - 1 - math.log(token_rho[t]))
            inside = lower <= rho <= upper
            if mode == "tis":
                weights[i][t], keep[i][t] = min(rho, upper), True
                truncated += rho > upper
            else:
                weights[i][t] = rho if inside else 0.0
                keep[i][t] = inside or mode == "mis"
                dropped += not inside
    n = len(rhos)
    stats = {
        "mismatch_kl": sum(k3s) / n,
        "rho_mean": sum(rhos) / n,
        "rho_min": min(rhos),
        "rho_max": max(rhos),
        "masked_fraction": dropped / n,
        "truncated_fraction": truncated / n,
    }
    return weights, keep, stats


def gspo_reference(
    logp: Tensor, old: Tensor, seq_adv: Tensor, mask: Tensor, clip_low: float, clip_high: float
) -> Tensor:
    """Mean over sequences of -min(s_i A_i, clip(s_i) A_i), s_i the geometric-mean ratio."""
    losses = []
    for i, positions in enumerate(_rows(mask)):
        if not positions:
            continue
        log_s = sum(logp[i, t] - old[i, t] for t in positions) / len(positions)
        s = torch.exp(log_s)
        a = seq_adv[i]
        losses.append(-torch.minimum(s * a, s.clamp(1 - clip_low, 1 + clip_high) * a))
    return torch.stack(losses).mean()


def cispo_reference(
    logp: Tensor,
    old: Tensor,
    adv: Tensor,
    mask: Tensor,
    clip_high: float,
    clip_low: float | None,
) -> Tensor:
    """-sum_t sg(clip(r_t)) A_t logp_t over real tokens, divided by their number."""
    terms = []
    for i, positions in enumerate(_rows(mask)):
        for t in positions:
            r = math.exp(float((logp[i, t] - old[i, t]).detach()))
            w = min(r, 1 + clip_high)
            if clip_low is not None:
                w = max(w, 1 - clip_low)
            terms.append(-w * adv[i, t] * logp[i, t])
    return torch.stack(terms).sum() / len(terms)


# --- rollout correction ------------------------------------------------------------------

CORRECTIONS = [
    pytest.param(mode, level, upper, lower, id=f"{mode}-{level}-C{upper}")
    for mode, level in [
        ("tis", "token"),
        ("tis", "sequence"),
        ("mis", "token"),
        ("mis", "sequence"),
        ("icepop", "token"),
    ]
    for upper, lower in [(2.0, None), (1.2, 0.8)]
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("mode", "level", "upper", "lower"), CORRECTIONS)
def test_rollout_correction_matches_reference(
    seed: int, mode: str, level: str, upper: float, lower: float | None
) -> None:
    batch = padded_batch(seed)
    old = batch["old"].clone().requires_grad_(True)
    weights, keep, stats = rollout_correction(
        old, batch["rollout"], batch["mask"], mode, level, upper, lower
    )
    ref_weights, ref_keep, ref_stats = rollout_correction_reference(
        batch["old"], batch["rollout"], batch["mask"], mode, level, upper,
        1 / upper if lower is None else lower,
    )  # fmt: skip
    assert not weights.requires_grad, "importance weights are constants"
    torch.testing.assert_close(weights, torch.tensor(ref_weights, dtype=torch.float64))
    assert keep.dtype == torch.bool
    assert keep.tolist() == ref_keep
    for name, value in ref_stats.items():
        torch.testing.assert_close(stats[name], torch.tensor(value, dtype=torch.float64))


def test_rollout_correction_exercises_every_branch() -> None:
    """The random batches above really contain truncated, dropped and kept tokens."""
    batch = padded_batch(0)
    _, _, tis = rollout_correction(
        batch["old"], batch["rollout"], batch["mask"], "tis", "token", 1.2
    )
    _, keep, icepop = rollout_correction(
        batch["old"], batch["rollout"], batch["mask"], "icepop", "token", 1.2, 0.8
    )
    assert 0 < tis["truncated_fraction"] < 1
    assert 0 < icepop["masked_fraction"] < 1
    assert tis["mismatch_kl"] > 0
    assert keep.sum() < batch["mask"].sum()


def test_rollout_correction_is_neutral_without_mismatch() -> None:
    batch = padded_batch(3)
    for mode in ("tis", "mis", "icepop"):
        weights, keep, stats = rollout_correction(batch["old"], batch["old"], batch["mask"], mode)
        torch.testing.assert_close(weights, batch["mask"].to(torch.float64))
        assert keep.tolist() == batch["mask"].tolist()
        assert stats["mismatch_kl"] == 0 and stats["masked_fraction"] == 0


def test_rollout_correction_of_an_empty_batch_is_zero_not_nan() -> None:
    x = torch.zeros(2, 3, dtype=torch.float64)
    _, _, stats = rollout_correction(x, x, torch.zeros(2, 3, dtype=torch.bool), "mis", "sequence")
    assert all(float(v) == 0.0 for v in stats.values())


# --- GSPO --------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    ("clip_low", "clip_high"),
    [pytest.param(3e-4, 4e-4, id="paper-defaults"), pytest.param(0.05, 0.08, id="wide")],
)
@pytest.mark.parametrize("adv_key", ["seq_adv", "seq_adv_bt"])
def test_gspo_matches_sequence_reference_values_and_gradients(
    seed: int, clip_low: float, clip_high: float, adv_key: str
) -> None:
    batch = padded_batch(seed)
    logp = batch["logp"].clone().requires_grad_(True)
    loss, stats = gspo_policy_loss(
        logp, batch["old"], batch[adv_key], batch["mask"], clip_low, clip_high
    )
    loss.backward()
    ref_logp = batch["logp"].clone().requires_grad_(True)
    ref = gspo_reference(
        ref_logp, batch["old"], batch["seq_adv"], batch["mask"], clip_low, clip_high
    )
    ref.backward()
    torch.testing.assert_close(loss, ref)
    assert logp.grad is not None and ref_logp.grad is not None
    torch.testing.assert_close(logp.grad, ref_logp.grad)
    # With the paper's narrow range some sequences are clipped (no gradient), some are not.
    assert stats["clip_frac"] < 1
    if clip_high == 4e-4:
        assert stats["clip_frac"] > 0


# --- CISPO -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    ("clip_high", "clip_low"),
    [pytest.param(0.2, None, id="no-lower-bound"), pytest.param(0.05, 0.1, id="both-bounds")],
)
def test_cispo_matches_reference_values_and_gradients(
    seed: int, clip_high: float, clip_low: float | None
) -> None:
    batch = padded_batch(seed)
    logp = batch["logp"].clone().requires_grad_(True)
    loss, stats = cispo_policy_loss(
        logp, batch["old"], batch["token_adv"], batch["mask"], clip_high, clip_low
    )
    loss.backward()
    ref_logp = batch["logp"].clone().requires_grad_(True)
    ref = cispo_reference(
        ref_logp, batch["old"], batch["token_adv"], batch["mask"], clip_high, clip_low
    )
    ref.backward()
    torch.testing.assert_close(loss, ref)
    assert logp.grad is not None and ref_logp.grad is not None
    torch.testing.assert_close(logp.grad, ref_logp.grad)
    assert 0 < stats["clip_frac"] < 1
    # Unlike PPO, every real token keeps a gradient, clipped or not.
    real = batch["mask"]
    assert bool((logp.grad[real] != 0).all())


# --- the correction's weights and keep mask on each loss ----------------------------------


def weighted_reference(
    loss: str, logp: Tensor, old: Tensor, adv: Tensor, weights: Tensor, keep: Tensor
) -> Tensor:
    """Each loss per token (GSPO in its token form: the sequence ratio carries each token's
    own gradient), times the token's weight, averaged over the kept tokens as the loss does."""
    rows = []
    for i, positions in enumerate(_rows(keep)):
        terms = []
        if loss == "gspo" and positions:
            log_s = sum(logp[i, t] - old[i, t] for t in positions) / len(positions)
        for t in positions:
            a, w = adv[i, t], float(weights[i, t])
            if loss == "ppo":
                r = torch.exp(logp[i, t] - old[i, t])
                term = torch.maximum(-a * r, -a * r.clamp(0.8, 1.2))
            elif loss == "gspo":
                r = torch.exp(log_s.detach() + logp[i, t] - logp[i, t].detach())
                term = torch.maximum(-a * r, -a * r.clamp(1 - 3e-4, 1 + 4e-4))
            else:
                r_hat = min(math.exp(float((logp[i, t] - old[i, t]).detach())), 1.2)
                term = -r_hat * a * logp[i, t]
            terms.append(term * w)
        rows.append(terms)
    if loss == "gspo":
        return torch.stack([torch.stack(r).mean() for r in rows if r]).mean()
    flat = [term for r in rows for term in r]
    return torch.stack(flat).sum() / len(flat)


@pytest.mark.parametrize("loss", ["ppo", "gspo", "cispo"])
@pytest.mark.parametrize(
    ("mode", "level"), [("tis", "token"), ("mis", "sequence"), ("icepop", "token")]
)
def test_correction_weights_and_keep_mask_on_each_loss(loss: str, mode: str, level: str) -> None:
    batch = padded_batch(3)
    weights, keep, stats = rollout_correction(
        batch["old"], batch["rollout"], batch["mask"], mode, level, 1.5, 0.7
    )
    if mode != "tis":
        assert 0 < float(stats["masked_fraction"]) < 1  # the case drops some, not all
    # Garbage in the padding of the weights must not leak either.
    weights = _with_garbage(weights, batch["mask"])
    adv = batch["seq_adv_bt"] if loss == "gspo" else batch["token_adv"]
    logp = batch["logp"].clone().requires_grad_(True)
    if loss == "ppo":
        value, _ = ppo_policy_loss(logp, batch["old"], adv, keep, weights=weights)
    elif loss == "gspo":
        value, _ = gspo_policy_loss(logp, batch["old"], adv, keep, weights=weights)
    else:
        value, _ = cispo_policy_loss(logp, batch["old"], adv, keep, 0.2, weights=weights)
    value.backward()
    ref_logp = batch["logp"].clone().requires_grad_(True)
    ref = weighted_reference(loss, ref_logp, batch["old"], adv, weights, keep)
    ref.backward()
    torch.testing.assert_close(value, ref)
    assert logp.grad is not None and ref_logp.grad is not None
    torch.testing.assert_close(logp.grad, ref_logp.grad)
    # Dropped tokens get no gradient.
    assert bool((logp.grad[batch["mask"] & (weights == 0)] == 0).all())


# --- bad input ---------------------------------------------------------------------------

X = torch.zeros(2, 3)
M = torch.ones(2, 3, dtype=torch.bool)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda: rollout_correction(X, X, M, "clip"), "mode must be one of", id="mode"),
        pytest.param(
            lambda: rollout_correction(X, X, M, "tis", "batch"), "level must be one of", id="level"
        ),
        pytest.param(
            lambda: rollout_correction(X, X, M, "icepop", "sequence"),
            "level must be 'token'",
            id="icepop-sequence",
        ),
        pytest.param(
            lambda: rollout_correction(X, X, M, "mis", "token", 2.0, 3.0),
            r"lower must be in \[0, 2\)",
            id="lower-above-upper",
        ),
        pytest.param(
            lambda: rollout_correction(X, X, M, "tis", "token", 0.0),
            r"upper must be in \(0, inf\)",
            id="upper-zero",
        ),
        pytest.param(
            lambda: rollout_correction(X, X[:1], M),
            "rollout_logp must have the same shape",
            id="rollout-shape",
        ),
        pytest.param(
            lambda: gspo_policy_loss(X, X, torch.zeros(3), M), "advantages must be", id="adv-shape"
        ),
        pytest.param(
            lambda: gspo_policy_loss(X, X, X, M, 1.0, 0.1),
            r"clip_low must be in \[0, 1\)",
            id="gspo-clip-low",
        ),
        pytest.param(
            lambda: cispo_policy_loss(X, X, X, M, -0.1),
            r"clip_high must be in \[0, inf\)",
            id="cispo-clip-high",
        ),
        pytest.param(
            lambda: cispo_policy_loss(X, X, X, M[:, :2], 0.2),
            "mask must have the shape",
            id="mask-shape",
        ),
    ],
)
def test_bad_input_names_the_argument(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
