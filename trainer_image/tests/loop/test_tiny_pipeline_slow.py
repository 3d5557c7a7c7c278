"""The tiny pipeline example end to end (`rlhf run manifests/examples/tiny-pipeline-cpu.yaml`):
SFT, a reward model from the SFT model, then PPO of the SFT model scored by that reward model.
PPO's reward (the reward model's score) rises, and the PPO stage loaded exactly the earlier
stages' exports (its inputs.json, and those directories hold the exported models).

Measured (`rlhf run manifests/examples/tiny-pipeline-cpu.yaml --run-dir /tmp/pl-run`, 2 shared
CPU cores, deterministic mode): SFT loss 6.28 -> 0.45 (32 steps, 3.2 min); reward model pair
accuracy 0.44 -> 1.00 (24 steps, 1.8 min); PPO mean reward (the reward model's score) of the
first fifth of its 30 steps 0.101, of the last fifth 0.247 (2.4 min)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from statistics import mean

import pytest

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "tiny-pipeline-cpu.yaml"


def _rewards(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [r["metrics"]["reward"] for r in records if r.get("event") == "step"]


def test_tiny_pipeline_runs_and_ppo_learns_from_the_earlier_stages(
    rlhf_run: Callable[[Path], tuple[Path, str]],
) -> None:
    run_dir, stderr = rlhf_run(EXAMPLE)
    assert "pipeline tiny-pipeline succeeded: 3 stages" in stderr
    sft, rm = run_dir / "sft" / "final", run_dir / "rm" / "final"
    assert json.loads((run_dir / "rm" / "inputs.json").read_text()) == [
        {"role": "actor", "fromStage": "sft", "model": str(sft)}
    ]
    assert json.loads((run_dir / "ppo" / "inputs.json").read_text()) == [
        {"role": "actor", "fromStage": "sft", "model": str(sft)},
        {"role": "rewardModels[0]", "fromStage": "rm", "model": str(rm)},
    ]
    for model in (sft, rm):
        assert (model / "config.json").is_file() and list(model.glob("*.safetensors")), model
    rewards = _rewards(run_dir / "ppo")
    assert len(rewards) == 30
    k = len(rewards) // 5
    first, last = mean(rewards[:k]), mean(rewards[-k:])
    print(f"PPO reward (reward model's score): first fifth {first:.4f}, last fifth {last:.4f}")
    assert last > first + 0.1, (first, last)
