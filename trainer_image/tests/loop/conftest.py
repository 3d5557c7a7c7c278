"""Job files for end-to-end runs: the tiny example manifest's spec, with overrides.

Every run here is real: local Ray, DeepSpeed ranks, vLLM (or HF generate), a tiny random-init
Llama, the repeat-letter task with the example's reward-function file.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "manifests" / "examples" / "tiny-ppo-cpu.yaml"
TINY_TASK = REPO / "manifests" / "examples" / "tiny-task"

JobFile = Callable[..., Path]


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `changes` into a copy of `base` (None writes an explicit null)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def example_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())["spec"]
    spec["models"]["rewardFunction"]["path"] = str(TINY_TASK / "reward_func.py")
    spec["data"]["train"] = [{"path": str(TINY_TASK / "prompts.jsonl")}]
    return spec


@pytest.fixture
def job_file(tmp_path: Path) -> JobFile:
    """`job_file(name="job", **section_overrides)` -> path of a bare job config (YAML)."""

    def write(name: str = "job", **changes: Any) -> Path:
        spec = merge(example_spec(), changes)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return write


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The step records of `metrics.jsonl` (checkpoint records skipped)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [r for r in records if r.get("event") == "step"]


# Small and fast: 2 steps of 4 prompts x 2 samples, 8 new tokens.
QUICK = {
    "rollout": {"samplesPerPrompt": 2, "maxNewTokens": 8},
    "training": {
        "rolloutBatchSize": 4,
        "trainBatchSize": 8,
        "microTrainBatchSize": 4,
        "microRolloutBatchSize": 8,
        "maxSteps": 2,
        "freezeActorSteps": 0,
    },
    "checkpoint": {"everySteps": 1, "keep": 2},
}
