"""Evaluation during a real run (`data.eval`, `training.evalEverySteps`): local Ray, DeepSpeed
ranks, the HF engine, the tiny task's reward-function file; metrics file and TensorBoard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import QUICK, TINY_TASK, JobFile, finish, read_metrics, rlhf_run


@pytest.mark.slow
def test_eval_metrics_appear_every_n_steps_and_after_the_last(
    job_file: JobFile, tmp_path: Path
) -> None:
    eval_prompts = tmp_path / "eval.jsonl"
    rows = [{"prompt": f"Repeat the letter {c}.", "label": c} for c in "abc"]
    eval_prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = job_file(
        algorithm={"name": "grpo"},
        rollout={**QUICK["rollout"], "engine": "hf"},
        data={
            "train": [{"path": str(TINY_TASK / "prompts.jsonl")}],
            "eval": [{"path": str(eval_prompts)}],
        },
        training={**QUICK["training"], "maxSteps": 3, "evalEverySteps": 2, "evalSamples": 4},
        checkpoint={"everySteps": 10, "keep": 1},
    )
    run_dir = tmp_path / "run"
    output = finish(rlhf_run(path, run_dir))

    records = {r["step"]: r for r in read_metrics(run_dir)}
    assert sorted(records) == [1, 2, 3]
    evaluated = [s for s, r in records.items() if "eval/greedy_reward" in r["metrics"]]
    assert evaluated == [2, 3]  # every 2 steps, and the last
    assert "eval" not in records[1]["timings"] and records[2]["timings"]["eval"] > 0
    for step in evaluated:
        m = records[step]["metrics"]
        assert m["eval/prompts"] == 3.0 and m["eval/samples"] == 4.0
        for key in ("greedy_reward", "mean_reward", "pass@1", "pass@2", "pass@4"):
            assert 0.0 <= m[f"eval/{key}"] <= 1.0, key
        assert m["eval/pass@1"] <= m["eval/pass@2"] <= m["eval/pass@4"]
    assert "eval/greedy_reward" in output  # the console line shows it

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    greedy = events.Scalars("metrics/eval/greedy_reward")
    assert [e.step for e in greedy] == [2, 3]
