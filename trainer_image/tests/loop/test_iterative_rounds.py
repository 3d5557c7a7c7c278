"""The iterative trainers end to end (real Ray, DeepSpeed, vLLM, the tiny examples):

- they learn: the mean reward of the policy's samples rises across rounds, on the example
  manifests exactly as `rlhf run` runs them (figures below);
- resume is exact: a run killed after round 2's checkpoint, while round 3 is under way, and
  resumed gives the same per-round metrics and the same final weights as a run never
  interrupted (deterministic mode), with a fixed and with a refreshed DPO reference (the three
  cases took 23 min together on 2 shared cores).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_learning import mean, run

from conftest import (
    QUICK,
    JobFile,
    assert_resume_was_exact,
    finish,
    holding_reward,
    kill_after_checkpoint,
    read_metrics,
    rlhf_run,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"


@pytest.mark.slow
@pytest.mark.parametrize(
    "example", ["tiny-rejection-sampling-cpu.yaml", "tiny-iterative-dpo-cpu.yaml"]
)
def test_the_examples_reward_rises_across_rounds(example: str, tmp_path: Path) -> None:
    """Measured on 2 shared cores (mean reward of the first / last 5 rounds of 40):
    rejection sampling 0.036 -> 0.761 (4.9 min), iterative DPO 0.036 -> 0.443 (6.9 min)."""
    rewards = run(EXAMPLES / example, tmp_path / "run")
    first, last = mean(rewards[:5]), mean(rewards[-5:])
    print(f"{example}: first 5 rounds {first:.3f}, last 5 rounds {last:.3f}")
    assert last > first + 0.15 and last > 2 * first


ROUNDS = 4


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "rejection-sampling"},
        {"name": "iterative-dpo"},
        {"name": "iterative-dpo", "refreshReference": True},
    ],
    ids=["rejection-sampling", "iterative-dpo", "iterative-dpo-refreshed-reference"],
)
def test_resume_mid_run_reproduces_the_straight_run(
    algorithm: dict[str, object], job_file: JobFile, tmp_path: Path
) -> None:
    # 4 rounds of 4 prompts x 4 samples, 2 passes over each round's selection.
    training = {**QUICK["training"], "trainBatchSize": 4, "microTrainBatchSize": 2}
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    half = ROUNDS // 2
    marker = resumed / "checkpoints" / f"step-{half:06d}" / "COMPLETE"
    models, armed = holding_reward(tmp_path, marker)
    path = job_file(
        algorithm=algorithm,
        models=models,
        rollout={**QUICK["rollout"], "samplesPerPrompt": 4},
        training={**training, "epochs": 2, "maxSteps": ROUNDS, "deterministic": True},
        checkpoint={"everySteps": ROUNDS // 2, "keep": 3},
        placement={"colocateActorReference": True},
    )
    finish(rlhf_run(path, straight))

    armed.touch()
    first = rlhf_run(path, resumed)
    kill_after_checkpoint(first, marker, armed)  # round 3 is being generated or scored
    written_before = len(read_metrics(resumed))
    assert written_before < ROUNDS, "the first run was not interrupted"
    out = finish(rlhf_run(path, resumed))
    assert f"finished {ROUNDS} steps (resumed at step {half})" in out
    assert_resume_was_exact(
        straight, resumed, steps=ROUNDS, written_before=written_before, resumed_at=half
    )
