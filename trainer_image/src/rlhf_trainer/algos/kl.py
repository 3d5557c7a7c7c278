"""KL divergence estimators and KL coefficient controllers.

The estimators follow John Schulman, "Approximating KL Divergence" (2020): for tokens sampled
from the policy, with `log r = ref_logp - logp`,

- k1 = `-log r = logp - ref_logp`: unbiased, high variance, can be negative;
- k2 = `0.5 * (log r)^2`: biased, low variance, always >= 0;
- k3 = `(r - 1) - log r`: unbiased, low variance, always >= 0.

The same function serves both places KL appears: as a per-token penalty folded into the rewards
(PPO, REINFORCE++; pass detached log-probs or detach the result) and as a loss term (GRPO puts
k3 in the loss; gradient then flows into `logp`, never into `ref_logp`).
"""

from __future__ import annotations

from typing import Final, Protocol

import torch
from torch import Tensor

from ._validation import (
    require_choice,
    require_float_tensor,
    require_mask,
    require_number_in,
    require_same_shape,
)

KL_KINDS: Final = ("k1", "k2", "k3")
# Log-ratios beyond this are numerically meaningless and would overflow exp (verl uses 20 too):
# every importance ratio of the losses and the rollout correction is clamped to it first.
MAX_LOG_RATIO: Final = 20.0


def kl_estimate(
    logp: Tensor,
    ref_logp: Tensor,
    kind: str,
    *,
    clamp: float | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """Per-token estimate of KL(policy || reference) from log-probs of sampled tokens.

    `kind` is `"k1"` (logp - ref_logp), `"k2"` (0.5 * (logp - ref_logp)^2) or `"k3"`
    (exp(ref_logp - logp) - (ref_logp - logp) - 1); see the module docstring for the source.

    Args:
        logp: log-probs of the sampled tokens under the policy (any shape, usually `[B, T]`).
        ref_logp: the same under the reference policy; treated as a constant (detached).
        clamp: if set, the log-ratio is clamped to [-clamp, clamp] before the estimator is
            applied, which keeps k3's exp finite (OpenRLHF uses 10).
        mask: optional mask of logp's shape; padding entries of the result are set to 0.
    Returns:
        A tensor of logp's shape.
    """
    require_float_tensor("logp", logp)
    require_float_tensor("ref_logp", ref_logp)
    require_same_shape("logp", logp, ref_logp=ref_logp)
    require_choice("kind", kind, KL_KINDS)
    if clamp is not None:
        require_number_in("clamp", clamp, low=0.0, low_open=True)

    log_ratio = logp - ref_logp.detach()
    if clamp is not None:
        log_ratio = log_ratio.clamp(min=-clamp, max=clamp)
    if mask is not None:
        require_mask("mask", mask, logp.shape)
        real = mask if mask.dtype == torch.bool else mask != 0
        # Select first: padding log-probs may be -inf, and exp(inf) would poison the gradient.
        log_ratio = torch.where(real, log_ratio, 0.0)

    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio**2
    # k3 with log r = -log_ratio: (r - 1) - log r.
    return torch.expm1(-log_ratio) + log_ratio


class KLController(Protocol):
    """What the trainer needs of a KL coefficient controller."""

    @property
    def value(self) -> float: ...

    def update(self, current_kl: float, n_steps: int) -> None: ...


class FixedKLController:
    """A constant KL coefficient (`update` is a no-op)."""

    def __init__(self, kl_coef: float) -> None:
        require_number_in("kl_coef", kl_coef, low=0.0)
        self._value = float(kl_coef)

    @property
    def value(self) -> float:
        return self._value

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt; the signature matches `AdaptiveKLController.update`."""


class AdaptiveKLController:
    """Adaptive KL coefficient of Ziegler et al. 2019 ("Fine-Tuning Language Models from Human
    Preferences", eq. 2).

    After each batch, with `e = clip(current_kl / target - 1, -0.2, 0.2)`, the coefficient is
    multiplied by `1 + e * n_steps / horizon`: it grows while the measured KL is above target
    and shrinks while below, at most 20% per `horizon` steps. `n_steps` and `horizon` count the
    same unit (samples in the paper, whose horizon is 10000).
    """

    def __init__(self, init: float, target: float, horizon: int) -> None:
        require_number_in("init", init, low=0.0)
        require_number_in("target", target, low=0.0, low_open=True)
        require_number_in("horizon", horizon, low=0.0, low_open=True)
        self._value = float(init)
        self.target = float(target)
        self.horizon = horizon

    @property
    def value(self) -> float:
        return self._value

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adapt the coefficient to the KL measured on the last `n_steps` (a host float)."""
        require_number_in("current_kl", current_kl)
        require_number_in("n_steps", n_steps, low=0.0)
        proportional_error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self._value *= 1.0 + proportional_error * n_steps / self.horizon
