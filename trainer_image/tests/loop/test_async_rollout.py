"""Async rollout (`rollout.async: true`) on the real stack: the engines generate step t+1's
batch while the actor trains on step t's, one step off-policy, and the run still learns and
still resumes exactly.

Measured on 2 shared cores: GRPO on the tiny example with async (100 steps, 3.3 min) went
from a mean reward of 0.062 over the first 20 % of steps to 0.985 over the last 20 %, every
step after the first one step stale (sync GRPO: 0.09 -> 1.00, see test_learning). The resume
test (6 steps, killed after the step-3 checkpoint) passed; its steps 2-6 waited ~0 s for
their batch, generated during the previous step's update.

With dynamic sampling the producer gathers each batch in rounds: GRPO on the tiny example
with async and dynamic sampling (at most 4 rounds a step, 100 steps, 2.0 min) went from a
mean reward of 0.061 to 0.987; the filtered fraction rose 0.053 -> 0.565 as groups were
solved, with 54 extra rounds in all. The resume test with it,
evaluation and `maxStaleness: 2` passed in 315 s (staleness 0, 1, 2, 2, 2, 2; steps 1, 2 and 5
took an extra round; the step-3 checkpoint held the batches of steps 4 and 5, step 5's
refilled, at data positions 24 and 32).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from test_learning import first_and_last_fifth, grpo_manifest, run
from test_resume import eval_data

from conftest import (
    EXAMPLE,
    QUICK,
    TINY_TASK,
    JobFile,
    finish,
    holding_reward,
    kill_after_checkpoint,
    read_metrics,
    rlhf_run,
    step_metrics,
)

ASYNC = {"async": True}


@pytest.mark.slow
def test_grpo_with_async_rollout_learns(tmp_path: Path) -> None:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["name"] = "tiny-grpo-async-cpu"
    spec = manifest["spec"]
    spec["algorithm"]["name"] = "grpo"
    spec["training"].pop("freezeActorSteps")  # critic warm-up: PPO only
    spec["rollout"] |= ASYNC
    spec["models"]["rewardFunction"]["path"] = str(TINY_TASK / "reward_func.py")
    spec["data"]["train"] = [{"path": str(TINY_TASK / "prompts.jsonl")}]
    path = tmp_path / "grpo-async.yaml"
    path.write_text(yaml.safe_dump(manifest))
    rewards = run(path, tmp_path / "grpo-async")
    staleness = [r["metrics"]["staleness"] for r in read_metrics(tmp_path / "grpo-async")]
    assert staleness[0] == 0 and set(staleness[1:]) == {1}
    first, last = first_and_last_fifth(rewards)
    print(f"grpo async: first 20% {first:.3f}, last 20% {last:.3f}")
    assert last > first + 0.25 and last > 3 * first


@pytest.mark.slow
def test_grpo_with_async_rollout_and_dynamic_sampling_learns(tmp_path: Path) -> None:
    """The background producer runs DAPO's rounds: each batch it hands over is full of
    informative groups, one step stale, and the run learns as the sync one does. Measured:
    reward 0.061 -> 0.987 (first/last 20 % of 100 steps), filtered fraction 0.053 -> 0.565,
    54 extra rounds (11 in the first 23 steps, where all-zero groups are dropped, the rest
    from step 76 on, once groups are solved), 121 s."""
    path = grpo_manifest(tmp_path, dynamicSampling=True, dynamicSamplingMaxRounds=4)
    manifest = yaml.safe_load(path.read_text())
    manifest["metadata"]["name"] = "tiny-dapo-async-cpu"
    manifest["spec"]["rollout"] |= ASYNC
    path.write_text(yaml.safe_dump(manifest))
    run_dir = tmp_path / "dapo-async"
    rewards = run(path, run_dir)
    metrics = [r["metrics"] for r in read_metrics(run_dir)]
    assert metrics[0]["staleness"] == 0 and {m["staleness"] for m in metrics[1:]} == {1}
    first, last = first_and_last_fifth(rewards)
    filtered = [m["dynamic_sampling/filtered_fraction"] for m in metrics]
    f_first, f_last = first_and_last_fifth(filtered)
    extra = sum(m["dynamic_sampling/extra_rounds"] for m in metrics)
    print(
        f"grpo async+dynamic sampling: reward {first:.3f} -> {last:.3f}, filtered "
        f"{f_first:.3f} -> {f_last:.3f}, extra rounds {extra}"
    )
    assert last > first + 0.25 and last > 3 * first
    assert f_last > f_first and extra > 0


@pytest.mark.slow
@pytest.mark.parametrize("dynamic", [False, True], ids=["async", "async-dynamic-sampling-eval"])
def test_resume_with_async_rollout_reproduces_the_straight_run(
    dynamic: bool, job_file: JobFile, tmp_path: Path
) -> None:
    """Killed after the step-3 checkpoint, whose saved batch for step 4 came from the
    step-2 weights: the resumed run trains on that very batch, then continues as the
    straight run did (same metrics every step, same final weights). With dynamic sampling
    (and evaluation every 2 steps) the saved batches are those the producer gathered in
    rounds, two steps ahead (`maxStaleness: 2`): their rewards, round metrics and data
    positions come back with them."""
    steps = 6
    extra = eval_data(tmp_path) if dynamic else {}
    training = {**QUICK["training"], "maxSteps": steps, "deterministic": True}
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    checkpoint = resumed / "checkpoints" / "step-000003"
    models, armed = holding_reward(tmp_path, checkpoint / "COMPLETE")
    path = job_file(
        algorithm={"name": "grpo", "normalizeReward": True, **extra.get("algorithm", {})},
        models=models,
        rollout={**QUICK["rollout"], **ASYNC, **({"maxStaleness": 2} if dynamic else {})},
        training=training | extra.get("training", {}),
        checkpoint={"everySteps": steps // 2, "keep": 3},
        **({"data": extra["data"]} if dynamic else {}),
    )
    finish(rlhf_run(path, straight))

    armed.touch()
    first = rlhf_run(path, resumed)
    kill_after_checkpoint(first, checkpoint / "COMPLETE", armed)
    pending = json.loads((checkpoint / "pending_rollouts.json").read_text())["rollouts"]
    assert [r["step"] for r in pending] == ([4, 5] if dynamic else [4])
    if dynamic:  # scored by the producer: the resumed run must not score them again
        assert all(len(r["rewards"]) == len(r["samples"]) for r in pending)
    written_before = len(read_metrics(resumed))
    assert written_before < steps, "the first run was not interrupted"
    finish(rlhf_run(path, resumed))

    a, b = step_metrics(straight), step_metrics(resumed)
    assert sorted(a) == sorted(b) == list(range(1, steps + 1))
    for step in range(1, steps + 1):
        assert a[step] == b[step], f"step {step} differs"
    if dynamic:  # the case really refilled and evaluated, on both sides of the kill
        assert sum(a[s]["dynamic_sampling/extra_rounds"] for s in a) > 0
        assert [s for s in a if "eval/pass@1" in a[s]] == [2, 4, 6]
        assert [a[s]["staleness"] for s in a] == [0.0, 1.0] + [2.0] * (steps - 2)
    else:
        assert [a[s]["staleness"] for s in a] == [0.0] + [1.0] * (steps - 1)

    weights_a = load_file(straight / "final" / "actor" / "model.safetensors")
    weights_b = load_file(resumed / "final" / "actor" / "model.safetensors")
    for name in weights_a:
        assert torch.equal(weights_a[name], weights_b[name]), name
