"""From sequence scores to the rewards the RL objective sees.

- `shape_token_rewards`: the KL-penalised per-token reward of Ziegler et al. 2019 / Stiennon et
  al. 2020 / Ouyang et al. 2022 (InstructGPT): the reward model's score on the last token, minus
  `kl_coef * KL` on every token.
- `RunningMeanStd`: running reward normalisation (parallel moments of Chan et al. 1979).
- `clip_rewards`: symmetric clipping of scores.
- `overlong_penalty`: DAPO's soft overlong punishment (Yu et al. 2025).
- `rollout_correction`: importance weights for the gap between the engine that sampled (vLLM)
  and the trainer (TIS, MIS, IcePop), with the mismatch statistics.

Rewards and weights are targets: the functions here detach their inputs.
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
    require_tensor,
)
from .kl import MAX_LOG_RATIO, kl_estimate
from .masking import last_token_mask, masked_count, masked_mean, masked_sum

ROLLOUT_CORRECTION_MODES: Final = ("tis", "mis", "icepop")
ROLLOUT_CORRECTION_LEVELS: Final = ("token", "sequence")


def shape_token_rewards(score: Tensor, kl: Tensor, mask: Tensor, kl_coef: float) -> Tensor:
    """Per-token rewards `-kl_coef * kl_t`, plus `score` on the last real token of each row.

    This is the RLHF reward `R(x, y) = r(x, y) - beta * log(pi(y|x) / ref(y|x))` of Ziegler et
    al. 2019 and Ouyang et al. 2022, spread over tokens: the KL term per token, the sequence
    score "on the EOS token" (the last real one, which may be followed by padding, and padding
    may also sit in the middle). A row with no real token receives nothing.

    Args:
        score: `[B]` sequence scores. kl: `[B, T]` per-token KL estimates (`kl.kl_estimate`).
        mask: `[B, T]`. kl_coef: >= 0 (0 leaves only the score).
    Returns:
        `[B, T]` rewards, detached, 0 on padding.
    """
    require_float_tensor("score", score)
    require_ndim("score", score, 1, "[B]")
    require_float_tensor("kl", kl)
    require_ndim("kl", kl, 2, "[B, T]")
    require_mask("mask", mask, kl.shape)
    if score.shape[0] != kl.shape[0]:
        raise ValueError(
            f"score has {score.shape[0]} entries but kl has {kl.shape[0]} rows; "
            "they must match (one score per sequence)"
        )
    require_number_in("kl_coef", kl_coef, low=0.0)

    real = mask if mask.dtype == torch.bool else mask != 0
    penalty = torch.where(real, kl.detach(), 0.0) * -kl_coef
    outcome = torch.where(last_token_mask(real), score.detach().to(kl.dtype)[:, None], 0.0)
    return penalty + outcome


def clip_rewards(rewards: Tensor, limit: float) -> Tensor:
    """Clamp rewards to `[-limit, limit]` (a new tensor; the input is untouched)."""
    require_float_tensor("rewards", rewards)
    require_number_in("limit", limit, low=0.0, low_open=True)
    return rewards.detach().clamp(min=-limit, max=limit)


def overlong_penalty(
    response_lengths: Tensor,
    max_length: int,
    buffer_length: int,
    penalty_factor: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """DAPO soft overlong punishment (Yu et al. 2025, eq. 13), scaled by `penalty_factor`.

    With `L_max = max_length`, `L_cache = buffer_length` and `|y|` the response length:
    0 if `|y| <= L_max - L_cache`; `((L_max - L_cache) - |y|) / L_cache` inside the buffer;
    -1 beyond `L_max`. Add the result to the sequence scores.

    Args:
        response_lengths: `[B]` lengths (int or float), e.g. `mask.sum(-1)`.
        max_length: the generation limit L_max (> 0).
        buffer_length: the soft buffer L_cache, in (0, max_length].
        penalty_factor: >= 0, multiplies the penalty.
        dtype: floating dtype of the result.
    Returns:
        `[B]` penalties in [-penalty_factor, 0].
    """
    require_tensor("response_lengths", response_lengths)
    require_ndim("response_lengths", response_lengths, 1, "[B]")
    require_number_in("max_length", max_length, low=0.0, low_open=True)
    require_number_in("buffer_length", buffer_length, low=0.0, high=max_length, low_open=True)
    require_number_in("penalty_factor", penalty_factor, low=0.0)
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")

    lengths = response_lengths.detach().to(dtype)
    excess = (lengths - (max_length - buffer_length)) / buffer_length
    return -penalty_factor * excess.clamp(min=0.0, max=1.0)


class RunningMeanStd:
    """Running mean and variance of every value passed to `update`, for reward normalisation.

    Batches are merged with the parallel algorithm of Chan, Golub & LeVeque (1979), so the
    statistics equal those of all values seen so far (population variance). The state is
    float64 tensors that follow the device of the data; no host sync happens. In data-parallel
    training, call `update` with the gathered batch (or the same batch) on every rank so that
    all ranks normalise identically.
    """

    def __init__(self, eps: float = 1e-8) -> None:
        require_number_in("eps", eps, low=0.0)
        self.eps = eps
        self.mean = torch.zeros((), dtype=torch.float64)
        self.var = torch.ones((), dtype=torch.float64)
        self.count = torch.zeros((), dtype=torch.float64)

    @property
    def std(self) -> Tensor:
        return torch.sqrt(self.var + self.eps)

    def update(self, values: Tensor, mask: Tensor | None = None) -> None:
        """Fold a batch (all elements, or only the real ones under `mask`) into the statistics."""
        require_float_tensor("values", values)
        batch = values.detach().double()
        if mask is None:
            real = torch.ones_like(batch, dtype=torch.bool)
        else:
            require_mask("mask", mask, values.shape)
            real = mask if mask.dtype == torch.bool else mask != 0
        mean, var, count = (t.to(batch.device) for t in (self.mean, self.var, self.count))

        batch_count = real.sum().double()
        safe_batch_count = batch_count.clamp(min=1.0)
        batch_mean = torch.where(real, batch, 0.0).sum() / safe_batch_count
        batch_var = (torch.where(real, batch - batch_mean, 0.0) ** 2).sum() / safe_batch_count

        total = count + batch_count
        safe_total = total.clamp(min=1.0)
        delta = batch_mean - mean
        new_mean = mean + delta * batch_count / safe_total
        m2 = var * count + batch_var * batch_count + delta**2 * count * batch_count / safe_total
        new_var = m2 / safe_total
        # Before any value has been seen keep the neutral state (mean 0, var 1).
        seen = total > 0
        self.mean = torch.where(seen, new_mean, mean)
        self.var = torch.where(seen, new_var, var)
        self.count = total

    def normalize(
        self, values: Tensor, *, shift_mean: bool = True, clip: float | None = None
    ) -> Tensor:
        """`(values - mean) / std` (or `values / std` without the shift), optionally clipped."""
        require_float_tensor("values", values)
        if clip is not None:
            require_number_in("clip", clip, low=0.0, low_open=True)
        mean = self.mean.to(device=values.device, dtype=values.dtype)
        std = self.std.to(device=values.device, dtype=values.dtype)
        normalized = (values - mean) / std if shift_mean else values / std
        if clip is not None:
            normalized = normalized.clamp(min=-clip, max=clip)
        return normalized

    def state_dict(self) -> dict[str, Tensor]:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        missing = {"mean", "var", "count"} - state.keys()
        if missing:
            raise ValueError(f"state is missing {sorted(missing)}; expected mean, var and count")
        self.mean, self.var, self.count = (
            state[key].detach().double().clone() for key in ("mean", "var", "count")
        )


def rollout_correction(
    old_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    mode: str = "tis",
    level: str = "token",
    upper: float = 2.0,
    lower: float | None = None,
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Importance weights that correct for sampling with the engine instead of the trainer.

    The engine (vLLM, in its own precision and kernels, possibly with older weights under async
    or partial rollout) samples the tokens; the trainer's log-prob of the same token, `old_logp`,
    differs from the engine's, `rollout_logp`. Per token `rho_t = exp(old_logp - rollout_logp)`;
    at `level="sequence"` every token of a sequence gets the sequence ratio
    `rho_i = exp(sum_t log rho_t)`. With `C = upper` and `lower` (default `1 / upper`, as verl):

    - `"tis"`, truncated importance sampling (Yao et al. 2025, "Your efficient RL framework
      secretly brings you off-policy RL training"): weight `min(rho, C)`; every token counts.
    - `"mis"`, masked importance sampling (Liu et al. 2025, "When speed kills stability"):
      weight `rho` where `lower <= rho <= C`, else 0: the token (or the whole sequence) is
      dropped from the loss but still counts in the token-mean's denominator.
    - `"icepop"` (Ling team 2025, Ring-1T): the same weight, token level only, and tokens
      outside `[lower, C]` also leave the denominator (`keep_mask` is False there).

    Multiply the per-token policy-gradient loss by `weights` and aggregate it over `keep_mask`.

    Args:
        old_logp, rollout_logp: `[B, T]` log-probs of the sampled tokens (trainer, engine).
        mask: `[B, T]` response mask. upper: C > 0. lower: in [0, C); unused by `"tis"`.
    Returns:
        `(weights, keep_mask, stats)`: detached `[B, T]` weights (0 on padding), the bool
        `[B, T]` mask to aggregate over, and detached scalar stats: `mismatch_kl` (k3 estimate
        of KL(engine || trainer) per token), `rho_mean`, `rho_min`, `rho_max` (of the ratio at
        the chosen level, before truncation, over real tokens), `masked_fraction` (real tokens
        whose weight is 0) and `truncated_fraction` (real tokens whose weight was cut to C).
    """
    require_float_tensor("old_logp", old_logp)
    require_ndim("old_logp", old_logp, 2, "[B, T]")
    require_float_tensor("rollout_logp", rollout_logp)
    require_same_shape("old_logp", old_logp, rollout_logp=rollout_logp)
    real = require_mask("mask", mask, old_logp.shape)
    real = real if real.dtype == torch.bool else real != 0
    require_choice("mode", mode, ROLLOUT_CORRECTION_MODES)
    require_choice("level", level, ROLLOUT_CORRECTION_LEVELS)
    if mode == "icepop" and level != "token":
        raise ValueError(f"mode 'icepop' masks single tokens; level must be 'token', got {level!r}")
    require_number_in("upper", upper, low=0.0, low_open=True)
    if lower is None:
        lower = 1.0 / upper
    require_number_in("lower", lower, low=0.0, high=upper, high_open=True)

    old_logp, rollout_logp = old_logp.detach(), rollout_logp.detach()
    # Select before exp: padding log-probs may be -inf or NaN.
    log_rho = torch.where(real, old_logp - rollout_logp, 0.0)
    if level == "sequence":
        log_rho = masked_sum(log_rho, real, dim=-1, keepdim=True).expand_as(log_rho)
    rho = torch.where(real, log_rho.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp(), 0.0)

    in_range = real & (rho >= lower) & (rho <= upper)
    if mode == "tis":
        weights = rho.clamp(max=upper)
        keep_mask = real
        truncated, dropped = real & (rho > upper), torch.zeros_like(real)
    else:
        weights = torch.where(in_range, rho, 0.0)
        keep_mask = in_range if mode == "icepop" else real
        truncated, dropped = torch.zeros_like(real), real & ~in_range

    dtype = old_logp.dtype
    count = masked_count(real)
    stats = {
        "mismatch_kl": masked_mean(
            kl_estimate(rollout_logp, old_logp, "k3", clamp=MAX_LOG_RATIO, mask=real), real
        ),
        "rho_mean": masked_mean(rho, real),
        "rho_min": torch.where(count > 0, torch.where(real, rho, torch.inf).amin(), 0.0),
        "rho_max": torch.where(count > 0, torch.where(real, rho, -torch.inf).amax(), 0.0),
        "masked_fraction": masked_mean(dropped.to(dtype), real),
        "truncated_fraction": masked_mean(truncated.to(dtype), real),
    }
    return weights, keep_mask, stats
