"""RLHFPipeline specs: the DAG's rules (each naming the field), the order, and what each stage
runs as on a cluster (fromJob) and locally (pretrained: the earlier stage's export)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from rlhf_trainer.cli import plan_files, validate_files
from rlhf_trainer.config import validation_messages
from rlhf_trainer.config.pipeline import (
    local_stage_config,
    stage_job_spec,
    topological_order,
    validate_pipeline_spec,
)

REPO = Path(__file__).resolve().parents[3]


def _stage(name: str, actor: dict[str, Any], algorithm: str = "sft") -> dict[str, Any]:
    return {
        "name": name,
        "spec": {
            "algorithm": {"name": algorithm},
            "models": {"actor": actor},
            "data": {"train": [{"hfId": "org/data"}]},
        },
    }


BASE = {"pretrained": "org/base"}


@pytest.mark.parametrize(
    ("stages", "expected"),
    [
        pytest.param(
            [_stage("a", BASE), _stage("a", BASE)],
            "stages[1].name: duplicate stage name 'a'",
            id="duplicate",
        ),
        pytest.param(
            [_stage("a", BASE), _stage("b", {"fromStage": "c"})],
            "stages[1].spec.models.actor.fromStage: no stage named 'c' (stages: a, b)",
            id="unknown",
        ),
        pytest.param(
            [_stage("a", {"fromStage": "a"})],
            "stages[0].spec.models.actor.fromStage: a stage cannot take its own model ('a')",
            id="self",
        ),
        pytest.param(
            [_stage("a", {"fromStage": "b"}), _stage("b", {"fromStage": "a"})],
            "stages[0]: the stages' fromStage references form a cycle: a -> b -> a",
            id="cycle",
        ),
    ],
)
def test_dag_problems_name_the_field(stages: list[dict[str, Any]], expected: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate_pipeline_spec({"stages": stages})
    assert validation_messages(err.value) == [expected]


def test_order_and_renderings() -> None:
    spec = validate_pipeline_spec(
        {
            "stages": [
                _stage("ppo", {"fromStage": "sft"}, "dpo"),
                _stage("sft", BASE),
                _stage("rm", BASE, "reward-model"),
            ]
        }
    )
    assert topological_order(spec) == ["sft", "ppo", "rm"]  # ties: in spec order
    job = stage_job_spec("p", spec.stage("ppo"))
    assert job["models"]["actor"] == {"fromJob": "p-sft", "trustRemoteCode": False}
    local = local_stage_config(spec.stage("ppo"), {"sft": "/runs/p-sft/final"})
    assert local.models.actor.pretrained == "/runs/p-sft/final"


def _write(tmp_path: Path, name: str, stages: list[dict[str, Any]]) -> Path:
    doc = {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFPipeline",
        "metadata": {"name": name},
        "spec": {"stages": stages},
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_validate_and_plan_a_pipeline(tmp_path: Path) -> None:
    path = _write(tmp_path, "p", [_stage("sft", BASE), _stage("dpo", {"fromStage": "sft"}, "dpo")])
    code, lines = validate_files([str(path)])
    assert (code, lines) == (0, [f"{path}: ok (RLHFPipeline p: stages sft -> dpo)"])
    code, lines = plan_files([str(path)], "text")
    assert code == 0 and f"{path} (p-sft):" in lines and f"{path} (p-dpo):" in lines


def test_stage_job_names_must_fit(tmp_path: Path) -> None:
    path = _write(tmp_path, "a-rather-long-pipeline-name", [_stage("supervised-ft", BASE)])
    code, lines = validate_files([str(path)])
    assert code == 1
    assert (
        "spec.stages[0].name: the stage's RLHFJob 'a-rather-long-pipeline-name-supervised-ft'"
        in lines[0]
    )


def test_the_tiny_pipeline_example_is_valid() -> None:
    code, lines = validate_files([str(REPO / "manifests/examples/tiny-pipeline-cpu.yaml")])
    assert code == 0, lines
