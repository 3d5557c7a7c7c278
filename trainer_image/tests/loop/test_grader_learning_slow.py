"""OpenAI graders as the reward of real GRPO runs on OpenAI's reinforcement JSONL
(`data.format: openai`): the example manifest's python grader learns the tiny task, and a
string_check grader trains end to end. Each row's extra field (`letter`) reaches the grader as
`item.letter`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_learning import first_and_last_fifth, run

from conftest import REPO, read_metrics

EXAMPLE = REPO / "manifests" / "examples" / "tiny-grader-cpu.yaml"
ROWS = REPO / "manifests" / "examples" / "tiny-task" / "reinforcement.jsonl"


def manifest(tmp_path: Path, **changes: Any) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    spec = doc["spec"]
    spec["data"]["train"] = [{"path": str(ROWS)}]
    for section, values in changes.items():
        spec[section] = {**spec.get(section, {}), **values}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.slow
def test_grpo_with_a_python_grader_learns(tmp_path: Path) -> None:
    rewards = run(manifest(tmp_path), tmp_path / "run")
    first, last = first_and_last_fifth(rewards)
    print(f"python grader: first 20% {first:.3f}, last 20% {last:.3f}")
    assert last > first + 0.25 and last > 3 * first


@pytest.mark.slow
def test_grpo_with_a_string_check_grader_trains_end_to_end(tmp_path: Path) -> None:
    grader = {
        "type": "string_check",
        "name": "has-letter",
        "input": "{{ sample.output_text }}",
        "reference": "{{ item.letter }}",
        "operation": "like",
    }
    path = manifest(
        tmp_path,
        models={"graderReward": {"grader": grader}},
        training={"maxSteps": 30},
    )
    run_dir = tmp_path / "run"
    rewards = run(path, run_dir)
    assert len(rewards) == 30
    assert all(0.0 <= r <= 1.0 for r in rewards)
    first, last = first_and_last_fifth(rewards)
    print(f"string_check grader: first 20% {first:.3f}, last 20% {last:.3f}")
    metrics = read_metrics(run_dir)[-1]["metrics"]
    assert metrics["reward/grader/errors"] == 0.0
    assert last >= first
