"""The policy objective's choices beside PPO: the loss (`algorithm.policyLoss`) and the
correction for sampling with the engine instead of the trainer (`algorithm.rolloutCorrection`).

Pure; `rlhf_trainer.algos` holds the losses and the correction as torch functions, and
`objective_rules` the rules of which combinations run.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from pydantic import Field

from .base import ConfigModel


class PolicyLoss(StrEnum):
    # PPO's per-token clipped surrogate (Schulman et al. 2017).
    PPO = "ppo"
    # GSPO (Zheng et al. 2025): one length-normalised ratio per sequence, clipped per sequence.
    GSPO = "gspo"
    # CISPO (MiniMax-M1, 2025): REINFORCE weighted by the clipped, detached token ratio.
    CISPO = "cispo"


# Ratio clip (eps_low, eps_high) of each loss when algorithm.clipLow / clipHigh are unset.
# GSPO's ratio is a geometric mean over the sequence, far closer to 1 than a token's: its
# paper's 3e-4 / 4e-4. CISPO: no lower bound (MiniMax-M1; verl's recipe sets
# clip_ratio_low=10, i.e. none) and 0.2 above (verl's recipe).
DEFAULT_CLIPS: Final[dict[PolicyLoss, tuple[float | None, float]]] = {
    PolicyLoss.PPO: (0.2, 0.2),
    PolicyLoss.GSPO: (3e-4, 4e-4),
    PolicyLoss.CISPO: (None, 0.2),
}


class RolloutCorrectionMode(StrEnum):
    # Truncated importance sampling: weight min(rho, upper) (Yao et al. 2025).
    TIS = "tis"
    # Masked importance sampling: drop what lies outside [lower, upper] (Liu et al. 2025).
    MIS = "mis"
    # IcePop (Ring-1T, 2025): as mis per token, and the dropped tokens leave the token mean.
    ICEPOP = "icepop"


class RolloutCorrectionLevel(StrEnum):
    TOKEN = "token"
    SEQUENCE = "sequence"


class RolloutCorrectionConfig(ConfigModel):
    """`algorithm.rolloutCorrection`: importance weights rho = pi_old / pi_rollout per sampled
    token, where pi_rollout is the engine's sampling log-prob and pi_old the trainer's, under
    the weights that sampled (sync rollout) or, with rollout.async, under the current weights
    before the step's update (verl's decoupled PPO); the PPO / GSPO / CISPO ratio is then
    taken against pi_old. Costs one extra forward pass of the actor per step."""

    mode: RolloutCorrectionMode = Field(
        description="tis: weight each token's loss by min(rho, upper); mis: drop tokens (or "
        "sequences) whose rho is outside [lower, upper] from the loss; icepop: as mis per "
        "token, and dropped tokens leave the token mean's denominator too."
    )
    level: RolloutCorrectionLevel = Field(
        RolloutCorrectionLevel.TOKEN,
        description="token: rho per token; sequence: the product of a sequence's token ratios, "
        "one weight (or drop) per sequence (tis and mis only).",
    )
    upper: float = Field(
        2.0,
        gt=1,
        le=1e6,
        description="C: the truncation (tis) or the upper edge of the kept range (mis, icepop); "
        "2 as verl's rollout_is_threshold.",
    )
    lower: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="The lower edge of the kept range (mis, icepop); default 1 / upper, as verl.",
    )

    def lower_bound(self) -> float:
        return 1.0 / self.upper if self.lower is None else self.lower
