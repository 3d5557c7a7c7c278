"""What differs between the offline trainers, decided once from the job config (pure).

Every trainer reads samples of `rows` sequences each (SFT, conditional SFT, distillation and
PRM: the response; pairs: chosen and rejected; KTO: the example and its mismatched KL
completion), trains either a causal LM or a value model, and needs the frozen reference's
log-probs, the frozen teacher's token distributions (distillation), or neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from rlhf_trainer.config import AlgorithmName, JobConfig


class TrainerKind(StrEnum):
    SFT = "sft"
    REWARD_MODEL = "reward-model"
    # DPO, IPO and conservative DPO: the same pairwise objective family (`algos.dpo_loss`).
    PREFERENCE = "preference"
    KTO = "kto"
    # The student's token distributions against a frozen teacher's, on SFT data.
    DISTILLATION = "distillation"
    # A process reward model: a causal LM judged at each step's separator token.
    PRM = "prm"


_KINDS = {
    AlgorithmName.SFT: TrainerKind.SFT,
    AlgorithmName.REWARD_MODEL: TrainerKind.REWARD_MODEL,
    AlgorithmName.DPO: TrainerKind.PREFERENCE,
    AlgorithmName.IPO: TrainerKind.PREFERENCE,
    AlgorithmName.CDPO: TrainerKind.PREFERENCE,
    AlgorithmName.KTO: TrainerKind.KTO,
    # The iterative algorithms train each round's selected samples with these objectives.
    AlgorithmName.REJECTION_SAMPLING: TrainerKind.SFT,
    AlgorithmName.ITERATIVE_DPO: TrainerKind.PREFERENCE,
    # SFT on prompts conditioned on the sample's score (the data loader differs).
    AlgorithmName.CONDITIONAL_SFT: TrainerKind.SFT,
    AlgorithmName.DISTILLATION: TrainerKind.DISTILLATION,
    AlgorithmName.PRM: TrainerKind.PRM,
}
# Algorithms that train with an offline objective (the iterative ones on generated data).
OFFLINE_ALGORITHMS = frozenset(_KINDS)

# Sequences per sample, the `K` of the `[B, K, L]` batch layout.
ROWS = {
    TrainerKind.SFT: 1,
    TrainerKind.REWARD_MODEL: 2,
    TrainerKind.PREFERENCE: 2,
    TrainerKind.KTO: 2,
    TrainerKind.DISTILLATION: 1,
    TrainerKind.PRM: 1,
}


@dataclass(frozen=True)
class OfflineSpec:
    algorithm: AlgorithmName
    kind: TrainerKind
    # "reward": a value model (backbone + scalar head); "causal-lm": a policy.
    model_kind: Literal["causal-lm", "reward"]
    needs_reference: bool
    # Distillation: the frozen teacher's token distributions (a role of its own).
    needs_teacher: bool
    # dpo_loss's `kind` for the preference trainers ("dpo" also for cdpo), else None.
    dpo_variant: Literal["dpo", "ipo"] | None
    # IPO is run on the mean token log-prob of a response (as TRL does), the others on the sum.
    average_logps: bool

    @property
    def rows(self) -> int:
        return ROWS[self.kind]


class OfflineConfigError(ValueError):
    """The job is not one the offline trainers run (an online algorithm)."""


def offline_spec(cfg: JobConfig) -> OfflineSpec:
    """The spec of the job's trainer. Every refusal of what the schema allows lives in the
    shared config rules (`rlhf_trainer.config.rules`), which a valid `JobConfig` has passed."""
    algo = cfg.algorithm.name
    if algo not in OFFLINE_ALGORITHMS:
        offline = ", ".join(sorted(a.value for a in OFFLINE_ALGORITHMS))
        raise OfflineConfigError(
            f"algorithm.name: {algo.value} is an online algorithm; offline objectives: {offline}"
        )
    kind = _KINDS[algo]
    variant: Literal["dpo", "ipo"] | None = None
    if kind is TrainerKind.PREFERENCE:
        variant = "ipo" if algo is AlgorithmName.IPO else "dpo"
    return OfflineSpec(
        algorithm=algo,
        kind=kind,
        model_kind="reward" if kind is TrainerKind.REWARD_MODEL else "causal-lm",
        needs_reference=kind in (TrainerKind.PREFERENCE, TrainerKind.KTO),
        needs_teacher=kind is TrainerKind.DISTILLATION,
        dpo_variant=variant,
        average_logps=algo is AlgorithmName.IPO,
    )
