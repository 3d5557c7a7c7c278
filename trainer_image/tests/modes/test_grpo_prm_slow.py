"""A process reward model trained by the `prm` trainer is the reward of a GRPO run, end to end
(`rlhf run manifests/examples/tiny-grpo-prm-cpu.yaml`): SFT teaches a weak policy the step
format, the PRM learns to judge steps, and GRPO of the SFT model scored by the PRM (weakest
step, `process.aggregation: min`) raises the PRM's score of its samples.

Measured (`rlhf run manifests/examples/tiny-grpo-prm-cpu.yaml --run-dir /tmp/modes13/pl2`, 2
shared CPU cores, 6.8 min of stages): SFT 64 steps (1.6 min); PRM 320 steps (3.5 min), held-out
step accuracy 1.0; GRPO 40 steps (1.7 min), the PRM's score of the samples 0.045 in the first
fifth of the steps, 0.30 in the last. What the task's own check (is each step the letter the
prompt names?) says: the SFT policy had not learned to read the letter (right steps 0.25,
chance), and GRPO collapsed it onto "a\\na\\na\\na" for every prompt, which the PRM scores 1 for
a quarter of the prompts; right steps stayed 0.25 (printed, not asserted)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from statistics import mean

import pytest

from rlhf_trainer.config import load_file

from .sampling import held_out_step_accuracy, right_step_share

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "tiny-grpo-prm-cpu.yaml"


def test_grpo_raises_the_score_of_a_trained_prm(
    rlhf_run: Callable[[Path], tuple[Path, str]],
) -> None:
    run_dir, stderr = rlhf_run(EXAMPLE)
    assert "pipeline tiny-grpo-prm succeeded: 3 stages" in stderr
    sft, prm = run_dir / "sft" / "final", run_dir / "prm" / "final"
    assert json.loads((run_dir / "grpo" / "inputs.json").read_text()) == [
        {"role": "actor", "fromStage": "sft", "model": str(sft)},
        {"role": "rewardModels[0]", "fromStage": "prm", "model": str(prm)},
    ]

    (job,) = load_file(EXAMPLE)
    assert job.pipeline is not None
    prm_cfg = next(s.spec for s in job.pipeline.stages if s.name == "prm")
    accuracy = held_out_step_accuracy(prm, prm_cfg, job.base_dir)

    lines = (run_dir / "grpo" / "metrics.jsonl").read_text().splitlines()
    steps = [r for r in map(json.loads, lines) if r.get("event") == "step"]
    rewards = [r["metrics"]["reward"] for r in steps]
    k = len(rewards) // 5
    first, last = mean(rewards[:k]), mean(rewards[-k:])
    before = right_step_share(sft, "abcd", n=16, seed=0)
    after = right_step_share(run_dir / "grpo" / "final" / "actor", "abcd", n=16, seed=0)
    print(
        f"PRM held-out step accuracy {accuracy:.3f}; GRPO reward (the PRM's score) first fifth "
        f"{first:.3f}, last fifth {last:.3f}; right steps {before:.3f} -> {after:.3f}"
    )
    assert accuracy > 0.9
    assert last > first + 0.15, rewards
