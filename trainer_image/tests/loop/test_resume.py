"""Resume is exact: N steps straight == N/2 steps, SIGKILL, resume for the rest.

Deterministic mode (`training.deterministic`): per-prompt sampling seeds, no vLLM prefix
cache, deterministic torch kernels. What a checkpoint restores: the actor's and critic's
DeepSpeed states (weights, Adam moments, LR scheduler), every rank's RNG, the data position,
the KL coefficient and the reward normaliser; the vLLM engines get the restored weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from conftest import (
    QUICK,
    JobFile,
    finish,
    holding_reward,
    kill_after_checkpoint,
    read_metrics,
    rlhf_run,
    step_metrics,
)

STEPS = 6


def eval_data(tmp_path: Path) -> dict[str, Any]:
    """Dynamic sampling's extra rounds move the data position; evaluations draw their own
    samples: a resumed run must replay both."""
    prompts = tmp_path / "eval.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": f"Repeat {c}.", "label": c}) + "\n" for c in "ab")
    )
    return {
        "algorithm": {"dynamicSampling": True, "dynamicSamplingMaxRounds": 3},
        "data": {"eval": [{"path": str(prompts)}]},
        "training": {"evalEverySteps": 2},
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algorithm", "more"),
    [
        pytest.param("ppo", False, id="ppo"),
        pytest.param("grpo", False, id="grpo"),
        pytest.param("grpo", True, id="grpo-dynamic-sampling-eval"),
    ],
)
def test_resume_after_kill_reproduces_the_straight_run(
    algorithm: str, more: bool, job_file: JobFile, tmp_path: Path
) -> None:
    extra = eval_data(tmp_path) if more else {}
    training = {**QUICK["training"], "maxSteps": STEPS, "deterministic": True}
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    marker = resumed / "checkpoints" / "step-000003" / "COMPLETE"
    models, armed = holding_reward(tmp_path, marker)
    path = job_file(
        algorithm={"name": algorithm, "normalizeReward": True, **extra.get("algorithm", {})},
        models=models,
        rollout=QUICK["rollout"],
        training=training | extra.get("training", {}),
        checkpoint={"everySteps": STEPS // 2, "keep": 3},
        **({"data": extra["data"]} if more else {}),
    )
    finish(rlhf_run(path, straight))

    armed.touch()
    first = rlhf_run(path, resumed)
    kill_after_checkpoint(first, marker, armed)
    written_before = len(read_metrics(resumed))
    assert written_before < STEPS, "the first run was not interrupted"
    out = finish(rlhf_run(path, resumed))
    assert f"finished {STEPS} steps" in out
    redone = [r["step"] for r in read_metrics(resumed)[written_before:]]
    assert redone == list(range(STEPS // 2 + 1, STEPS + 1))

    a, b = step_metrics(straight), step_metrics(resumed)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert a[step] == b[step], f"step {step} differs"
    if more:  # the case really refilled and evaluated, on both sides of the kill
        assert sum(a[s]["dynamic_sampling/extra_rounds"] for s in a) > 0
        assert [s for s in a if "eval/pass@1" in a[s]] == [2, 4, 6]

    weights_a = load_file(straight / "final" / "actor" / "model.safetensors")
    weights_b = load_file(resumed / "final" / "actor" / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        assert torch.equal(weights_a[name], weights_b[name]), name
