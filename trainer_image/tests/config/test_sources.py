"""`fromJob` / `fromStage` model sources: where each is accepted and who refuses what."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rlhf_trainer.cli import validate_files
from rlhf_trainer.config import JobSpec
from rlhf_trainer.config.sources import IN_PIPELINE, job_references, with_pretrained
from rlhf_trainer.context.job import JobError
from rlhf_trainer.runner.main import select_job


def _spec(**models: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "dpo"},
        "models": models,
        "data": {"train": [{"hfId": "org/prefs"}]},
    }


def _manifest(tmp_path: Path, **models: Any) -> Path:
    doc = {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFJob",
        "metadata": {"name": "dpo-b"},
        "spec": _spec(**models),
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    "actor",
    [
        pytest.param({}, id="none"),
        pytest.param({"pretrained": "org/m", "fromJob": "sft-a"}, id="pretrained-and-fromJob"),
        pytest.param({"fromJob": "sft-a", "fromStage": "sft"}, id="fromJob-and-fromStage"),
    ],
)
def test_exactly_one_source(actor: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="set exactly one of pretrained, randomInit, fromJob or"):
        JobSpec.model_validate(_spec(actor=actor))


def test_from_job_names_a_job() -> None:
    with pytest.raises(ValueError, match="fromJob"):
        JobSpec.model_validate(_spec(actor={"fromJob": "Not_A_Name"}))


def test_validate_accepts_from_job(tmp_path: Path) -> None:
    code, lines = validate_files([str(_manifest(tmp_path, actor={"fromJob": "sft-a"}))])
    assert code == 0, lines


def test_run_refuses_from_job_saying_why(tmp_path: Path) -> None:
    path = _manifest(tmp_path, actor={"fromJob": "sft-a"}, reference={"pretrained": "org/m"})
    with pytest.raises(JobError) as err:
        select_job(path)
    assert "spec.models.actor.fromJob: names the model of RLHFJob 'sft-a', which only the " in str(
        err.value
    )
    assert "RLHFPipeline" in str(err.value)


def test_from_stage_outside_a_pipeline_is_refused(tmp_path: Path) -> None:
    code, lines = validate_files([str(_manifest(tmp_path, actor={"fromStage": "sft"}))])
    assert code == 1
    assert any("spec.models.actor.fromStage: names a pipeline stage ('sft')" in x for x in lines)
    spec = JobSpec.model_validate(_spec(actor={"fromStage": "sft"}), context={IN_PIPELINE: True})
    assert spec.models.actor.from_stage == "sft"


def test_with_pretrained_keeps_the_other_keys() -> None:
    doc = _spec(
        actor={"fromJob": "sft-a", "trustRemoteCode": True},
        reference={"pretrained": "org/m"},
    )
    spec = JobSpec.model_validate(doc)
    assert job_references(spec) == {"actor": "sft-a"}
    resolved = with_pretrained(spec, {"actor": "pvc://c/sft-a/final"})
    assert isinstance(resolved, JobSpec)
    assert resolved.models.actor.pretrained == "pvc://c/sft-a/final"
    assert resolved.models.actor.from_job is None
    assert resolved.models.actor.trust_remote_code is True
    assert resolved.models.reference == spec.models.reference
    assert job_references(resolved) == {}
    # The same spec as validating the edited manifest gives, and the input is not changed.
    manifest = resolved.to_manifest()
    assert JobSpec.model_validate(manifest) == resolved
    assert manifest["models"]["actor"] == {
        "pretrained": "pvc://c/sft-a/final",
        "trustRemoteCode": True,
    }
    assert spec.models.actor.from_job == "sft-a"
