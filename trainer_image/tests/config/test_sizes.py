"""Specs whose objects Kubernetes could not store are refused naming the field
(`config.sizes`); the quick bound that spares the exact measure is never below it."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from rlhf_trainer.config import JobConfig, JobSpec, validation_messages
from rlhf_trainer.config.sizes import (
    ENV_BUDGET,
    JOB_CONFIG_BUDGET,
    _bound,
    json_size,
    size_problems,
)

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "manifests" / "examples"


def minimal(**extra: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "ppo"},
        "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
        "data": {"train": [{"builtin": "repeat-letter"}]},
        "training": {"rolloutBatchSize": 8, "trainBatchSize": 8, "microTrainBatchSize": 2},
        **extra,
    }


def example_specs() -> list[dict[str, Any]]:
    specs = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "RLHFJob":
                specs.append(doc["spec"])
    return specs


@pytest.mark.parametrize("doc", [minimal(), *example_specs()])
def test_the_quick_bound_is_never_below_the_exact_size(doc: dict[str, Any]) -> None:
    spec = JobSpec.model_validate(doc)
    manifest = spec.to_manifest()
    config = {f.alias or k: manifest.get(f.alias or k) for k, f in JobConfig.model_fields.items()}
    assert _bound(spec, set(JobConfig.model_fields)) >= json_size(config)
    env = [e.to_manifest() for e in spec.env]
    assert _bound(spec, {"env"}) >= json_size(env)


def problems_of(doc: dict[str, Any]) -> list[str]:
    try:
        JobSpec.model_validate(doc)
    except ValidationError as err:
        return validation_messages(err)
    return []


def test_a_config_too_big_for_its_configmap_names_the_field() -> None:
    template = "x" * JOB_CONFIG_BUDGET
    doc = minimal(data={"train": [{"builtin": "repeat-letter"}], "chatTemplate": template})
    [problem] = problems_of(doc)
    assert problem.startswith("data.chatTemplate: ")
    assert "over Kubernetes' 1 MiB limit" in problem


def test_an_env_too_big_for_every_container_is_refused() -> None:
    value = "y" * (ENV_BUDGET // 100)
    [problem] = problems_of(minimal(env=[{"name": f"V{i}", "value": value} for i in range(110)]))
    assert problem.startswith("env")
    assert "spec.env is" in problem


def test_a_spec_under_the_budgets_has_no_problem() -> None:
    value = "y" * (ENV_BUDGET // 200)
    doc = minimal(env=[{"name": f"V{i}", "value": value} for i in range(100)])
    assert size_problems(JobSpec.model_validate(doc)) == []
