"""Advantage estimators: GAE, discounted returns, group baselines, and whitening.

Advantages and returns are regression/weighting *targets*: every estimator here works on detached
inputs and returns tensors without gradient, so no gradient can reach the critic or the reward
through them.

Padding in the middle of a response (e.g. tool output in a multi-turn rollout) is skipped by the
recursions: the result on the real tokens equals the estimator run on the row with its padding
removed. Padding positions of the outputs are 0.

How the online algorithms use these (the trainer composes them; the papers are cited on each):
- PPO: `gae` on `rewards.shape_token_rewards(...)` and the critic's values, then `whiten`.
- GRPO / Dr. GRPO / RLOO: `group_advantages` on sequence scores, `broadcast_to_tokens`.
- REINFORCE++: `discounted_returns` on shaped token rewards, then `whiten` with global stats.
- REINFORCE++-baseline: `group_advantages(method="reinforce_baseline")` on scores, then as
  REINFORCE++ (shaping, returns, global whitening).
"""

from __future__ import annotations

from typing import Final

import torch
from torch import Tensor

from ._validation import (
    require_choice,
    require_float_tensor,
    require_mask,
    require_ndim,
    require_number_in,
    require_same_shape,
)
from .masking import masked_mean, masked_var

GROUP_METHODS: Final = ("grpo", "dr_grpo", "rloo", "reinforce_baseline")


def _real_mask(name: str, mask: Tensor, shape: torch.Size) -> Tensor:
    require_mask(name, mask, shape)
    return mask if mask.dtype == torch.bool else mask != 0


def gae(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the masked response (Schulman et al. 2016).

    With `delta_t = r_t + gamma * V_{t+1} - V_t` (V after the last real token is 0: the response
    ends there), `A_t = delta_t + gamma * lam * A_{t+1}`, and `returns = advantages + values`.
    `t + 1` means the next *real* token: padding is skipped. gamma=lam=1 gives the Monte-Carlo
    return minus the value; lam=0 gives the one-step TD error.

    Args:
        rewards, values: `[B, T]` float, per token (padding entries are ignored).
        mask: `[B, T]`, non-zero for real response tokens.
        gamma, lam: discount and GAE lambda, each in [0, 1].
    Returns:
        `(advantages, returns)`, both `[B, T]`, detached, 0 on padding.
    """
    require_float_tensor("rewards", rewards)
    require_ndim("rewards", rewards, 2, "[B, T]")
    require_float_tensor("values", values)
    require_same_shape("rewards", rewards, values=values)
    real = _real_mask("mask", mask, rewards.shape)
    require_number_in("gamma", gamma, low=0.0, high=1.0)
    require_number_in("lam", lam, low=0.0, high=1.0)

    rewards, values = rewards.detach(), values.detach()
    batch, length = rewards.shape
    next_value = rewards.new_zeros(batch)
    next_advantage = rewards.new_zeros(batch)
    columns: list[Tensor] = []
    # A Python loop over T on [B]-vectors, as verl and OpenRLHF do: T is at most a few thousand
    # and each step is a handful of fused elementwise ops.
    for t in reversed(range(length)):
        is_real = real[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        # On padding, carry the running quantities through unchanged: the recursion skips it.
        next_advantage = torch.where(is_real, advantage, next_advantage)
        next_value = torch.where(is_real, values[:, t], next_value)
        columns.append(torch.where(is_real, advantage, 0.0))
    advantages = torch.stack(columns[::-1], dim=1)
    returns = torch.where(real, advantages + values, 0.0)
    return advantages, returns


def discounted_returns(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """REINFORCE returns `G_t = r_t + gamma * G_{t+1}` over the masked response (Williams 1992).

    REINFORCE++ (Hu 2025) uses these on KL-shaped token rewards (`rewards.shape_token_rewards`)
    with gamma = 1, then whitens them over the global batch (`whiten` with external statistics)
    to obtain the advantages. `t + 1` is the next real token; padding is skipped and set to 0.

    Args:
        rewards: `[B, T]` float, per token. mask: `[B, T]`. gamma: in [0, 1].
    Returns:
        `[B, T]` returns, detached, 0 on padding.
    """
    require_float_tensor("rewards", rewards)
    require_ndim("rewards", rewards, 2, "[B, T]")
    real = _real_mask("mask", mask, rewards.shape)
    require_number_in("gamma", gamma, low=0.0, high=1.0)

    rewards = rewards.detach()
    running = rewards.new_zeros(rewards.shape[0])
    columns: list[Tensor] = []
    for t in reversed(range(rewards.shape[1])):
        is_real = real[:, t]
        running = torch.where(is_real, rewards[:, t] + gamma * running, running)
        columns.append(torch.where(is_real, running, 0.0))
    return torch.stack(columns[::-1], dim=1)


def group_advantages(scores: Tensor, group_size: int, method: str, eps: float = 1e-6) -> Tensor:
    """Per-sequence advantages from a baseline computed within each prompt's group of samples.

    `scores` is `[B]` with the `group_size` samples of each prompt laid out consecutively
    (`B = n_prompts * group_size`). With r the scores of one group, mean and (unbiased, n - 1)
    std taken over the group:

    - `"grpo"`: `(r - mean) / (std + eps)` — GRPO (Shao et al. 2024, DeepSeekMath).
    - `"dr_grpo"`: `r - mean` — Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like
      Training") drops the std division, which biases towards easy/hard questions.
    - `"rloo"`: `r_i - mean_{j != i} r_j = group_size / (group_size - 1) * (r_i - mean)` —
      REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024).
    - `"reinforce_baseline"`: `r - mean` — REINFORCE++-baseline (Hu 2025); the trainer then
      shapes and whitens over the global batch, which is what distinguishes it from Dr. GRPO.

    Returns `[B]`, detached; broadcast over tokens with `broadcast_to_tokens`.
    """
    require_float_tensor("scores", scores)
    require_ndim("scores", scores, 1, "[B]")
    require_choice("method", method, GROUP_METHODS)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(
            f"group_size must be an integer >= 2 (a baseline needs other samples of the same "
            f"prompt), got {group_size!r}"
        )
    if scores.shape[0] % group_size != 0:
        raise ValueError(
            f"scores has {scores.shape[0]} entries, which is not a multiple of group_size "
            f"{group_size}: lay out group_size consecutive samples per prompt"
        )
    require_number_in("eps", eps, low=0.0)

    groups = scores.detach().reshape(-1, group_size)
    centred = groups - groups.mean(dim=-1, keepdim=True)
    if method == "grpo":
        advantages = centred / (groups.std(dim=-1, keepdim=True) + eps)
    elif method == "rloo":
        advantages = centred * (group_size / (group_size - 1))
    else:  # "dr_grpo" and "reinforce_baseline" share the group-mean baseline
        advantages = centred
    return advantages.reshape(-1)


def broadcast_to_tokens(sequence_values: Tensor, mask: Tensor) -> Tensor:
    """Spread a per-sequence `[B]` value over the real tokens of `[B, T]` (0 on padding).

    This is how outcome-reward estimators (GRPO, Dr. GRPO, RLOO) assign the sequence's
    advantage to every one of its tokens.
    """
    require_float_tensor("sequence_values", sequence_values)
    require_ndim("sequence_values", sequence_values, 1, "[B]")
    require_ndim("mask", mask, 2, "[B, T]")
    if mask.shape[0] != sequence_values.shape[0]:
        raise ValueError(
            f"mask has {mask.shape[0]} rows but sequence_values has "
            f"{sequence_values.shape[0]} entries; they must match (one value per sequence)"
        )
    real = mask if mask.dtype == torch.bool else mask != 0
    return torch.where(real, sequence_values[:, None], 0.0)


def whiten(
    x: Tensor,
    mask: Tensor,
    shift_mean: bool = True,
    *,
    mean: Tensor | float | None = None,
    var: Tensor | float | None = None,
    eps: float = 1e-8,
) -> Tensor:
    """Masked normalisation `(x - mean) / sqrt(var + eps)` over the real tokens; 0 on padding.

    The statistics are the population mean and variance of `x` over all real tokens of the
    batch, unless `mean` and `var` are given: pass the global ones (from all-reduced
    `masking.masked_moments`, see `masking.mean_var_from_moments`) so that every data-parallel
    rank whitens identically. With `shift_mean=False` the mean is added back, so only the scale
    changes (as PPO implementations do for rewards).
    """
    require_float_tensor("x", x)
    real = _real_mask("mask", mask, x.shape)
    require_number_in("eps", eps, low=0.0)
    if (mean is None) != (var is None):
        raise ValueError(
            "mean and var must be given together (global statistics) or both left unset "
            f"(statistics of this batch); got mean={'set' if mean is not None else 'None'}, "
            f"var={'set' if var is not None else 'None'}"
        )
    if mean is None or var is None:
        mean_t, var_t = masked_mean(x, real), masked_var(x, real)
    else:  # global statistics often arrive in float64 from the all-reduce: match x's dtype
        mean_t = torch.as_tensor(mean, dtype=x.dtype, device=x.device)
        var_t = torch.as_tensor(var, dtype=x.dtype, device=x.device)
    # Select before scaling, so that -inf/NaN in padding cannot reach a gradient.
    whitened = torch.where(real, x - mean_t, 0.0) * torch.rsqrt(var_t + eps)
    if not shift_mean:
        whitened = torch.where(real, whitened + mean_t, 0.0)
    return whitened
