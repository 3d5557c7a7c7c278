"""What a checkpoint keeps of the driver (`rlhf_trainer.checkpoint.TrainerState`): progress,
data position, KL coefficient, reward normalisation. The ranks save their own part (weights,
optimizer, scheduler, RNG)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from rlhf_trainer.algos.kl import AdaptiveKLController, FixedKLController, KLController
from rlhf_trainer.algos.rewards import RunningMeanStd
from rlhf_trainer.checkpoint import (
    TrainerState,
    load_rng_state,
    load_trainer_state,
    save_rng_state,
    save_trainer_state,
)
from rlhf_trainer.config import AlgorithmConfig

REWARD_STATS = "reward_stats"


def advanced(state: TrainerState, **changes: Any) -> TrainerState:
    return replace(state, **changes)


def kl_controller(algo: AlgorithmConfig, value: float | None = None) -> KLController:
    coef = algo.kl_coef if value is None else value
    if algo.kl_target is not None:
        return AdaptiveKLController(coef, algo.kl_target, algo.kl_horizon)
    return FixedKLController(coef)


def reward_normalizer(state: TrainerState) -> RunningMeanStd:
    norm = RunningMeanStd()
    stats = state.extra.get(REWARD_STATS)
    if stats:
        norm.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in stats.items()})
    return norm


def normalizer_stats(norm: RunningMeanStd) -> dict[str, float]:
    # float() of a float64 tensor is exact, so a JSON round trip restores the same statistics.
    return {k: float(v) for k, v in norm.state_dict().items()}


def save_state(state: TrainerState, directory: Path) -> None:
    save_trainer_state(directory, state)
    save_rng_state(directory)


def load_state(directory: Path) -> TrainerState:
    load_rng_state(directory)
    return load_trainer_state(directory)
