"""It learns: on the tiny example (repeat the letter), the mean reward of the last 20 % of steps
clearly exceeds the first 20 %, for PPO (critic, GAE) and for GRPO.

The PPO run is the example manifest exactly as `make demo` runs it; GRPO changes only the
algorithm. Measured on 2 cores: PPO 0.07 -> 0.71, GRPO 0.09 -> 1.00 (100 steps, ~1.5 min each).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLE, TINY_TASK, read_metrics


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def run(manifest: Path, run_dir: Path) -> list[float]:
    proc = subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", "run", str(manifest), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [r["metrics"]["reward"] for r in read_metrics(run_dir)]


def first_and_last_fifth(rewards: list[float]) -> tuple[float, float]:
    k = max(1, len(rewards) // 5)
    return mean(rewards[:k]), mean(rewards[-k:])


@pytest.mark.slow
def test_ppo_example_learns(tmp_path: Path) -> None:
    rewards = run(EXAMPLE, tmp_path / "ppo")
    first, last = first_and_last_fifth(rewards)
    print(f"ppo: first 20% {first:.3f}, last 20% {last:.3f}")
    assert last > first + 0.25 and last > 3 * first


@pytest.mark.slow
def test_grpo_on_the_example_learns(tmp_path: Path) -> None:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["name"] = "tiny-grpo-cpu"
    spec = manifest["spec"]
    spec["algorithm"]["name"] = "grpo"
    spec["training"].pop("freezeActorSteps")  # critic warm-up: PPO only
    spec["models"]["rewardFunction"]["path"] = str(TINY_TASK / "reward_func.py")
    spec["data"]["train"] = [{"path": str(TINY_TASK / "prompts.jsonl")}]
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(manifest))
    rewards = run(path, tmp_path / "grpo")
    first, last = first_and_last_fifth(rewards)
    print(f"grpo: first 20% {first:.3f}, last 20% {last:.3f}")
    assert last > first + 0.25 and last > 3 * first
