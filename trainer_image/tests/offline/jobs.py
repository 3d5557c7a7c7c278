"""Job configs of the offline tests: a tiny model from the shared fixtures, CPU placement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlhf_trainer.config import JobConfig

RAY_RESOURCE = "GPU-like"


def offline_job(
    algorithm: str,
    model_dir: Path,
    data_file: str,
    *,
    steps: int | None,
    lr: float,
    ranks: int = 1,
    zero: int = 0,
    micro: int = 4,
    batch: int = 8,
    every: int | None = None,
    algorithm_extra: dict[str, Any] | None = None,
    training_extra: dict[str, Any] | None = None,
) -> JobConfig:
    return JobConfig.model_validate(
        {
            "algorithm": {"name": algorithm, **(algorithm_extra or {})},
            "models": {"actor": {"pretrained": str(model_dir)}},
            "data": {"train": [{"path": data_file}], "maxPromptLength": 32, "maxLength": 64},
            "training": {
                "trainBatchSize": batch,
                "microTrainBatchSize": micro,
                "maxSteps": steps,
                "actorLearningRate": lr,
                "lrWarmupRatio": 0.1,
                "zeroStage": zero,
                "bf16": False,
                "seed": 7,
                **(training_extra or {}),
            },
            "placement": {"device": "cpu", "rayResource": RAY_RESOURCE, "actorGpus": ranks},
            "checkpoint": {"everySteps": every, "keep": 3},
            "logging": {"tensorboard": False},
        }
    )
