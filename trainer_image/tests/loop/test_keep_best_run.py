"""checkpoint.keepBest in a real run: local Ray, DeepSpeed ranks, the HF engine, evaluation on
eval prompts every step; the best-scoring checkpoint outlives `keep: 1` and is exported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import QUICK, TINY_TASK, JobFile, finish, read_metrics, rlhf_run
from rlhf_trainer.checkpoint import CheckpointManager
from rlhf_trainer.config import BestMode, KeepBest


@pytest.mark.slow
def test_keep_best_keeps_a_checkpoint_keep_1_would_delete(
    job_file: JobFile, tmp_path: Path
) -> None:
    """Every step evaluates and so checkpoints; with evalPassThreshold -1 every response
    passes, so eval/pass@1 is 1.0 at each step and the first (step 1) stays the best (a
    later one must do strictly better). keep: 1 alone would leave step 4 only."""
    eval_prompts = tmp_path / "eval.jsonl"
    rows = [{"prompt": f"Repeat the letter {c}.", "label": c} for c in "ab"]
    eval_prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = job_file(
        algorithm={"name": "grpo"},
        rollout={**QUICK["rollout"], "engine": "hf"},
        data={
            "train": [{"path": str(TINY_TASK / "prompts.jsonl")}],
            "eval": [{"path": str(eval_prompts)}],
        },
        training={
            **QUICK["training"],
            "maxSteps": 4,
            "evalEverySteps": 1,
            "evalSamples": 2,
            "evalPassThreshold": -1.0,
        },
        checkpoint={"everySteps": 100, "keep": 1, "keepBest": {"metric": "eval/pass@1"}},
    )
    run_dir = tmp_path / "run"
    output = finish(rlhf_run(path, run_dir))

    records = {r["step"]: r["metrics"] for r in read_metrics(run_dir)}
    assert [records[s]["eval/pass@1"] for s in (1, 2, 3, 4)] == [1.0] * 4
    rule = KeepBest(metric="eval/pass@1", mode=BestMode.MAX)
    manager = CheckpointManager(run_dir / "checkpoints", keep=1, keep_best=rule)
    assert [c.step for c in manager.checkpoints()] == [1, 4]
    best = manager.best()
    assert best is not None and (best.step, best.score) == (1, 1.0)

    record = json.loads((run_dir / "best" / "best.json").read_text())
    assert record == {
        "step": 1,
        "metric": "eval/pass@1",
        "score": 1.0,
        "checkpoint": str(best.path),
    }
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run_dir / "best" / "actor")
    assert model.config.hidden_size == 64
    assert (run_dir / "final" / "actor").is_dir()
    events = [r for r in _events(run_dir) if r["event"] == "best"]
    assert [(e["step"], e["score"]) for e in events] == [(1, 1.0)]
    assert f"best: step 1 (eval/pass@1 = 1, {best.path}, model in {run_dir / 'best'})" in output


def _events(run_dir: Path) -> list[dict[str, object]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]
