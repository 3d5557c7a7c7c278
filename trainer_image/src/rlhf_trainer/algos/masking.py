"""Masked reductions over per-token tensors.

A mask is a bool or numeric tensor of the same shape as the values: non-zero (True) marks a real
response token, zero marks padding, which may sit anywhere (at the end, or in the middle for
multi-turn responses). Padding values are never read: they are selected away with `torch.where`
rather than multiplied by zero, so `-inf` or NaN in padding (a common sight in log-probs) cannot
leak into a result or a gradient.

An empty selection (a row or batch without real tokens) reduces to 0, never to NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._validation import require_float_tensor, require_mask, require_same_shape


def _checked(x: Tensor, mask: Tensor) -> Tensor:
    """Validate the pair and return the mask as bool."""
    require_float_tensor("x", x)
    require_mask("mask", mask, x.shape)
    return mask if mask.dtype == torch.bool else mask != 0


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Sum of `x` over real tokens: `sum_i x_i * m_i`, over all elements or along `dim`."""
    selected = torch.where(_checked(x, mask), x, 0.0)
    if dim is None:
        return selected.sum()
    return selected.sum(dim=dim, keepdim=keepdim)


def masked_count(mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Number of real tokens (as int64), over all elements or along `dim`."""
    real = mask if mask.dtype == torch.bool else mask != 0
    if dim is None:
        return real.sum()
    return real.sum(dim=dim, keepdim=keepdim)


def _safe_divide(total: Tensor, count: Tensor) -> Tensor:
    # Where nothing was counted the total is 0 too; divide by 1 so the result is 0, not NaN
    # (and so is its gradient).
    count = count.to(total.dtype)
    return total / torch.where(count > 0, count, torch.ones_like(count))


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Mean of `x` over real tokens: `sum(x * m) / sum(m)`; 0 where there is no real token.

    With `dim=None` this is the token-level mean over the whole batch (one scalar); with
    `dim=-1` it is one mean per sequence.
    """
    total = masked_sum(x, mask, dim=dim, keepdim=keepdim)
    return _safe_divide(total, masked_count(mask, dim=dim, keepdim=keepdim))


def token_weighted(loss_mat: Tensor, weights: Tensor | None, real: Tensor) -> Tensor:
    """`loss_mat` times the detached per-token `weights` (0 where not `real`: padding
    weights may be garbage), or unchanged when there are none."""
    if weights is None:
        return loss_mat
    require_float_tensor("weights", weights)
    require_same_shape("loss_mat", loss_mat, weights=weights)
    return loss_mat * torch.where(real, weights.detach(), 0.0)


def masked_var(
    x: Tensor,
    mask: Tensor,
    dim: int | None = None,
    keepdim: bool = False,
    unbiased: bool = False,
) -> Tensor:
    """Variance of `x` over real tokens (two-pass, so no cancellation).

    Population variance `sum(m (x - mean)^2) / n` by default; with `unbiased=True` the Bessel
    correction `/(n - 1)` is used where n > 1 (a single element has variance 0 either way).
    """
    real = _checked(x, mask)
    mean = masked_mean(x, real, dim=dim, keepdim=True)
    # Select before squaring: a -inf in padding would otherwise turn the gradient into NaN.
    squared = torch.where(real, x - mean, 0.0) ** 2
    total = squared.sum() if dim is None else squared.sum(dim=dim, keepdim=keepdim)
    count = masked_count(real, dim=dim, keepdim=keepdim)
    if unbiased:
        count = (count - 1).clamp(min=1)
    return _safe_divide(total, count)


def masked_moments(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`(sum, sum of squares, count)` of `x` over real tokens, in float64.

    These three scalars are what data-parallel ranks all-reduce (SUM) to obtain global
    statistics; turn the reduced sums into a mean and variance with `mean_var_from_moments`.
    float64 keeps `E[x^2] - E[x]^2` from cancelling badly.
    """
    real = _checked(x, mask)
    values = torch.where(real, x, 0.0).double()
    return values.sum(), (values * values).sum(), real.sum().double()


def mean_var_from_moments(
    total: Tensor, total_sq: Tensor, count: Tensor, dtype: torch.dtype | None = None
) -> tuple[Tensor, Tensor]:
    """Population mean and variance from (possibly all-reduced) `masked_moments`.

    `var = E[x^2] - E[x]^2`, clamped at 0 against rounding; both are 0 when `count` is 0.
    `dtype` casts the results (e.g. back to the values' float32).
    """
    mean = _safe_divide(total, count)
    var = (_safe_divide(total_sq, count) - mean * mean).clamp(min=0.0)
    if dtype is not None:
        mean, var = mean.to(dtype), var.to(dtype)
    return mean, var


def last_token_mask(mask: Tensor) -> Tensor:
    """Bool `[B, T]` marking the last real token of each row (all False for an empty row).

    Works with padding in the middle: it is the real token with no real token after it, found
    as the position where the right-to-left running count of real tokens is exactly 1.
    """
    if mask.dim() != 2:
        raise ValueError(f"mask must have 2 dimensions [B, T], got shape {tuple(mask.shape)}")
    real = mask if mask.dtype == torch.bool else mask != 0
    real_from_right = real.flip(-1).long().cumsum(-1).flip(-1)
    return real & (real_from_right == 1)
