"""A score model as the reward (what the gateway makes of an OpenAI score_model grader): a
tiny random-init reward model built locally scores GRPO's samples through the trainer's
reward-model path, its raw scores mapped into the grader's range (`scoreRange`) by a sigmoid,
and the policy learns to raise them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_learning import first_and_last_fifth, run

from conftest import REPO, read_metrics

EXAMPLE = REPO / "manifests" / "examples" / "tiny-grader-cpu.yaml"
ROWS = REPO / "manifests" / "examples" / "tiny-task" / "reinforcement.jsonl"
TINY = {"hiddenSize": 64, "numLayers": 2, "numHeads": 2, "intermediateSize": 128, "vocabSize": 512}


@pytest.mark.slow
def test_grpo_raises_a_score_models_bounded_score(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    spec = doc["spec"]
    spec["data"]["train"] = [{"path": str(ROWS)}]
    spec["models"] = {
        "actor": spec["models"]["actor"],
        "rewardModels": [{"randomInit": {**TINY, "seed": 3}, "scoreRange": [2.0, 4.0]}],
    }
    spec["training"]["maxSteps"] = 20
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    run_dir = tmp_path / "run"
    rewards = run(manifest, run_dir)
    assert len(rewards) == 20
    model_scores = [r["metrics"]["reward/model_0"] for r in read_metrics(run_dir)]
    assert all(2.0 < s < 4.0 for s in model_scores), model_scores  # in range, never raw
    assert rewards == pytest.approx(model_scores)  # the only reward source
    first, last = first_and_last_fifth(rewards)
    print(f"score model in [2, 4]: first 20% {first:.4f}, last 20% {last:.4f}")
    assert last > first
