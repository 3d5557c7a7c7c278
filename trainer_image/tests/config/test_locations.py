"""Where files and volumes are: pvc:// and s3:// parsing, malformed locations, storage that a
multi-node job cannot share, and the paths only `rlhf run` can read."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rlhf_trainer.config import JobSpec, cluster_problems
from rlhf_trainer.config.locations import (
    PvcPath,
    S3Uri,
    is_relative_local,
    is_relative_model_path,
    parse_pvc,
    parse_s3,
)

BASE: dict[str, Any] = {
    "algorithm": {"name": "grpo"},
    "models": {
        "actor": {"pretrained": "org/actor"},
        "rewardFunction": {"builtin": "repeat-letter"},
    },
    "data": {"train": [{"builtin": "repeat-letter"}]},
    "rollout": {"samplesPerPrompt": 4},
}


def spec(**sections: Any) -> JobSpec:
    return JobSpec.model_validate({**BASE, **sections})


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("pvc://datasets/math/train.jsonl", PvcPath("datasets", "math/train.jsonl")),
        ("pvc://models", PvcPath("models", "")),
        ("s3://bucket-1/prefix/a.jsonl", S3Uri("bucket-1", "prefix/a.jsonl")),
        ("s3://bucket-1", S3Uri("bucket-1", "")),
    ],
)
def test_locations_parse(value: str, parsed: PvcPath | S3Uri) -> None:
    assert (parse_pvc(value) if value.startswith("pvc") else parse_s3(value)) == parsed
    assert str(parsed) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("pvc://Bad_Claim/x", "PersistentVolumeClaim name"),
        ("pvc://claim/../etc/passwd", "must not contain '..'"),
        ("s3://B/x", "not an S3 bucket name"),
    ],
)
def test_malformed_locations_are_refused_with_the_field(value: str, message: str) -> None:
    with pytest.raises(ValidationError, match=rf"data\.train\[0\]\.path: .*{message}"):
        spec(data={"train": [{"path": value}]})


def test_relative_paths() -> None:
    assert is_relative_local("tiny-task/prompts.jsonl")
    assert not any(map(is_relative_local, ["/data/x", "~/x", "pvc://c/x", "s3://bucket/x"]))


def test_cluster_refuses_files_of_the_authors_machine_only() -> None:
    job = spec(
        data={
            "train": [
                {"path": "tiny-task/prompts.jsonl", "probability": 0.5},
                {"path": "pvc://data/p.jsonl", "probability": 0.5},
            ]
        },
        models={"actor": {"pretrained": "org/actor"}, "rewardFunction": {"path": "reward.py"}},
    )
    problems = {p.path: p.message for p in cluster_problems(job)}
    assert set(problems) == {"data.train[0].path", "models.rewardFunction.path"}
    assert "pvc://<claim>/<path>" in problems["data.train[0].path"]


@pytest.mark.parametrize(
    ("value", "relative"),
    [
        ("./models/actor", True),
        ("../../runs/tiny-sft-cpu/final", True),
        (".", True),
        ("org/actor", False),  # a Hugging Face id
        ("gpt2", False),
        ("/models/actor", False),  # inside the image or a mounted volume
        ("pvc://models/actor", False),
        ("s3://bucket/actor", False),
        (".hidden-org/model", False),  # a hub id may start with a dot; a path starts with ./
    ],
)
def test_relative_model_paths(value: str, relative: bool) -> None:
    assert is_relative_model_path(value) is relative


def test_cluster_refuses_model_directories_of_the_authors_machine() -> None:
    """`rlhf run` reads `./x` against the manifest's directory; in a pod it names nothing."""
    job = spec(
        models={
            "actor": {"pretrained": "./actor"},
            "reference": {"pretrained": "/models/ref"},
            "rewardModels": [{"pretrained": "../rm"}, {"pretrained": "org/rm"}],
            "critic": {"pretrained": "pvc://models/critic"},
        },
        data={"train": [{"path": "pvc://data/p.jsonl"}]},
        algorithm={"name": "ppo"},
        rollout={"samplesPerPrompt": 1},
    )
    assert job.models.actor.pretrained == "./actor"  # valid for `rlhf run`
    problems = {p.path: p.message for p in cluster_problems(job)}
    assert set(problems) == {"models.actor.pretrained", "models.rewardModels[0].pretrained"}
    message = problems["models.actor.pretrained"]
    assert message.startswith("'./actor' is a directory on your machine")
    for allowed in ("Hugging Face id", "pvc://", "s3://", "absolute path", "fromJob"):
        assert allowed in message


RWO_STORAGE = {"storage": {"size": "10Gi", "accessMode": "ReadWriteOnce"}}


def test_read_write_once_is_refused_for_jobs_on_several_worker_pods() -> None:
    with pytest.raises(ValidationError, match=r"checkpoint\.storage\.accessMode: ReadWriteOnce"):
        spec(placement={"actorGpus": 8, "gpusPerNode": 8}, checkpoint=RWO_STORAGE)


def test_read_write_once_is_fine_for_one_worker_pod() -> None:
    job = spec(placement={"actorGpus": 2, "gpusPerNode": 8}, checkpoint=RWO_STORAGE)
    assert job.checkpoint.storage is not None
    assert job.checkpoint.storage.access_mode == "ReadWriteOnce"


def test_a_configmap_data_source_is_one_of_the_sources() -> None:
    job = spec(data={"train": [{"configMapRef": {"name": "tiny-task", "key": "prompts.jsonl"}}]})
    assert job.data.train[0].config_map_ref is not None
    with pytest.raises(ValidationError, match="exactly one of path, hfId, configMapRef or builtin"):
        spec(data={"train": [{"path": "x", "configMapRef": {"name": "a", "key": "b"}}]})
