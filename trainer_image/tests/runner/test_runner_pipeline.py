"""`rlhf run PIPELINE.yaml`'s orchestration, with each stage's training replaced by a recorder
that writes the export a real run writes (the real runs: loop/test_tiny_pipeline_slow.py): the
order, what each stage loads (`fromStage` -> the earlier export, recorded in inputs.json) and
the stop at the first failed stage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlhf_trainer.config import JobConfig, load_file
from rlhf_trainer.runner.pipeline import run_pipeline


def _stage(name: str, algorithm: str, actor: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "algorithm": {"name": algorithm},
        "models": {"actor": actor},
        "data": {"train": [{"hfId": "org/data"}]},
    }
    if algorithm == "ppo":
        spec["models"]["rewardModels"] = [{"fromStage": "rm"}]
    return {"name": name, "spec": spec}


def _pipeline(tmp_path: Path) -> Path:
    doc = {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFPipeline",
        "metadata": {"name": "p"},
        "spec": {
            "stages": [
                _stage("ppo", "ppo", {"fromStage": "sft"}),
                _stage("rm", "reward-model", {"fromStage": "sft"}),
                _stage("sft", "sft", {"pretrained": "org/base"}),
            ]
        },
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class Recorder:
    """Stands in for `main.run_config`: records each stage and writes its export."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, JobConfig]] = []

    def __call__(self, config: JobConfig, *, name: str, run_dir: Path | None, **_: Any) -> int:
        self.calls.append((name, config))
        assert run_dir is not None
        export = run_dir / "final" / ("actor" if config.algorithm.name.is_online else "")
        export.mkdir(parents=True)
        return 78 if name == "p-rm" and "fail-rm" in str(run_dir) else 0


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def test_stages_run_in_order_each_loading_the_earlier_exports(
    tmp_path: Path, recorder: Recorder
) -> None:
    [loaded] = load_file(_pipeline(tmp_path))
    runs = tmp_path / "runs"
    assert run_pipeline(loaded, recorder, resume=None, max_steps=None, run_dir=runs) == 0
    ran = recorder.calls
    assert [name for name, _ in ran] == ["p-sft", "p-rm", "p-ppo"]
    ppo = ran[2][1]
    assert ppo.models.actor.pretrained == str(runs / "sft" / "final")
    assert ppo.models.reward_models[0].pretrained == str(runs / "rm" / "final")
    assert json.loads((runs / "ppo" / "inputs.json").read_text()) == [
        {"role": "actor", "fromStage": "sft", "model": str(runs / "sft" / "final")},
        {"role": "rewardModels[0]", "fromStage": "rm", "model": str(runs / "rm" / "final")},
    ]
    assert json.loads((runs / "sft" / "inputs.json").read_text()) == []


def test_the_first_failed_stage_stops_the_pipeline(tmp_path: Path, recorder: Recorder) -> None:
    [loaded] = load_file(_pipeline(tmp_path))
    runs = tmp_path / "fail-rm"
    code = run_pipeline(loaded, recorder, resume=None, max_steps=None, run_dir=runs)
    assert code == 78
    assert [name for name, _ in recorder.calls] == ["p-sft", "p-rm"]
