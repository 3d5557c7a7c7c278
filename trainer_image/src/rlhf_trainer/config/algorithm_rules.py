"""Rules of the algorithm section: what an algorithm needs of the rest of the spec, and the
knobs of the iterative algorithms (rejection sampling, iterative DPO) that others do not use.
Pure; `rules.job_problems` runs them with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .algorithm import AlgorithmName
from .base import Problem

if TYPE_CHECKING:
    from .job import JobConfig


def algorithm_problems(cfg: JobConfig) -> list[Problem]:
    algo = cfg.algorithm.name
    out: list[Problem] = []
    if algo.is_group_estimator and cfg.rollout.samples_per_prompt < 2:
        out.append(
            Problem(
                "rollout.samplesPerPrompt",
                f"must be > 1 for algorithm {algo.value} (got {cfg.rollout.samples_per_prompt})",
            )
        )
    if algo is AlgorithmName.CDPO and cfg.algorithm.label_smoothing <= 0:
        out.append(
            Problem(
                "algorithm.labelSmoothing",
                "must be > 0 for algorithm cdpo (conservative DPO's label noise), e.g. 0.1",
            )
        )
    if cfg.training.freeze_actor_steps and not algo.needs_critic:
        out.append(
            Problem(
                "training.freezeActorSteps",
                f"critic warm-up needs a critic: only algorithm ppo has one (got {algo.value})",
            )
        )
    return out


def iterative_problems(cfg: JobConfig) -> list[Problem]:
    """Rejection sampling and iterative DPO: their own knobs, and what they do not use."""
    a, algo = cfg.algorithm, cfg.algorithm.name
    out: list[Problem] = []
    own = [
        (
            "iterations",
            a.iterations is not None,
            algo.is_iterative,
            "rejection-sampling and iterative-dpo",
        ),
        (
            "rewardThreshold",
            a.reward_threshold is not None,
            algo is AlgorithmName.REJECTION_SAMPLING,
            "rejection-sampling",
        ),
        (
            "refreshReference",
            a.refresh_reference,
            algo is AlgorithmName.ITERATIVE_DPO,
            "iterative-dpo",
        ),
    ]
    for field, given, applies, which in own:
        if given and not applies:
            out.append(
                Problem(
                    f"algorithm.{field}", f"applies to {which} only; remove it for {algo.value}"
                )
            )
    if not algo.is_iterative:
        return out
    n = cfg.rollout.samples_per_prompt
    if n < 2 and (algo is AlgorithmName.ITERATIVE_DPO or a.reward_threshold is None):
        why = (
            "a chosen/rejected pair needs two samples of a prompt"
            if algo is AlgorithmName.ITERATIVE_DPO
            else "best-of-n needs several samples of a prompt (or set algorithm.rewardThreshold)"
        )
        out.append(
            Problem("rollout.samplesPerPrompt", f"must be > 1 for {algo.value}: {why}; got {n}")
        )
    if a.refresh_reference and cfg.models.reference is not None:
        out.append(
            Problem(
                "algorithm.refreshReference",
                "replaces the reference with the policy at the start of each round, so "
                "models.reference would never be used: remove one of them",
            )
        )
    unused = [
        ("algorithm.normalizeReward", a.normalize_reward, "selection ranks raw rewards"),
        ("algorithm.overlongBuffer", a.overlong_buffer is not None, "selection ranks raw rewards"),
        ("algorithm.useKlLoss", a.use_kl_loss, "the objective is SFT or DPO, with no KL term"),
        ("rollout.agent", cfg.rollout.agent is not None, "rounds are single-turn"),
        (
            "training.ppoEpochs",
            cfg.training.ppo_epochs != 1,
            "a round trains training.epochs passes over its selection",
        ),
    ]
    for field, given, why in unused:
        if given:
            out.append(Problem(field, f"is not used by {algo.value} ({why}); remove it"))
    return out
