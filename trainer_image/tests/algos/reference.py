"""Plain-Python reference implementations the torch functions are checked against.

They use the textbook closed forms (explicit sums, leave-one-out loops) rather than the
recursions of the implementation, so agreement is evidence, not tautology. Padding is handled
the obvious way: drop the padded positions, compute on what is left, put the results back.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def _real_positions(mask_row: Sequence[float]) -> list[int]:
    return [t for t, m in enumerate(mask_row) if m]


def gae_row(
    rewards: Sequence[float],
    values: Sequence[float],
    mask: Sequence[float],
    gamma: float,
    lam: float,
) -> tuple[list[float], list[float]]:
    """A_t = sum_l (gamma lam)^l delta_{t+l} over the real tokens; V after the end is 0."""
    positions = _real_positions(mask)
    r = [rewards[t] for t in positions]
    v = [values[t] for t in positions]
    n = len(positions)
    deltas = [r[k] + gamma * (v[k + 1] if k + 1 < n else 0.0) - v[k] for k in range(n)]
    advantages = [0.0] * len(mask)
    returns = [0.0] * len(mask)
    for i, t in enumerate(positions):
        advantages[t] = sum((gamma * lam) ** (k - i) * deltas[k] for k in range(i, n))
        returns[t] = advantages[t] + v[i]
    return advantages, returns


def discounted_returns_row(
    rewards: Sequence[float], mask: Sequence[float], gamma: float
) -> list[float]:
    """G_t = sum_k gamma^(k - t) r_k over the real tokens from t on."""
    positions = _real_positions(mask)
    r = [rewards[t] for t in positions]
    out = [0.0] * len(mask)
    for i, t in enumerate(positions):
        out[t] = sum(gamma ** (k - i) * r[k] for k in range(i, len(r)))
    return out


def group_advantages_list(
    scores: Sequence[float], group_size: int, method: str, eps: float
) -> list[float]:
    out: list[float] = []
    for start in range(0, len(scores), group_size):
        group = list(scores[start : start + group_size])
        mean = statistics.fmean(group)
        for i, r in enumerate(group):
            if method == "grpo":
                out.append((r - mean) / (statistics.stdev(group) + eps))
            elif method == "rloo":
                others = group[:i] + group[i + 1 :]
                out.append(r - statistics.fmean(others))
            else:
                out.append(r - mean)
    return out


def ppo_token_loss(
    logp: float,
    old_logp: float,
    advantage: float,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
) -> float:
    ratio = math.exp(logp - old_logp)
    clipped_ratio = min(max(ratio, 1.0 - clip_low), 1.0 + clip_high)
    loss = max(-advantage * ratio, -advantage * clipped_ratio)
    if dual_clip is not None and advantage < 0:
        loss = min(loss, -advantage * dual_clip)
    return loss


def aggregate(
    loss: Sequence[Sequence[float]],
    mask: Sequence[Sequence[float]],
    aggregation: str,
    norm_length: float | None = None,
) -> float:
    rows = [
        [value for value, m in zip(row, mask_row, strict=True) if m]
        for row, mask_row in zip(loss, mask, strict=True)
    ]
    if aggregation == "token-mean":
        tokens = [value for row in rows for value in row]
        return sum(tokens) / len(tokens)
    rows = [row for row in rows if row]
    if aggregation == "seq-mean-token-mean":
        return statistics.fmean(statistics.fmean(row) for row in rows)
    if aggregation == "seq-mean-token-sum":
        return statistics.fmean(sum(row) for row in rows)
    length = len(loss[0]) if norm_length is None else norm_length
    return statistics.fmean(sum(row) / length for row in rows)


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def sigmoid(x: float) -> float:
    return math.exp(log_sigmoid(x))
