"""s3:// inputs and outputs against moto's S3 server on loopback (started by the test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlhf_trainer.config import JobConfig
from rlhf_trainer.config.output import ObjectStoreConfig
from rlhf_trainer.objectstore import (
    InputLocationError,
    ObjectStoreError,
    client,
    fetch_inputs,
    upload_outputs,
)

BUCKET = "rlhf-test"  # conftest.S3_BUCKET


@pytest.fixture
def store(s3_store: ObjectStoreConfig) -> ObjectStoreConfig:
    return s3_store


def job(store: ObjectStoreConfig, **sections: Any) -> JobConfig:
    doc: dict[str, Any] = {
        "algorithm": {"name": "sft"},
        "models": {"actor": {"randomInit": {}}},
        "data": {"train": [{"builtin": "repeat-letter"}]},
        "objectStore": store.to_manifest(),
        **sections,
    }
    return JobConfig.model_validate(doc)


def test_every_output_file_lands_in_the_bucket(store: ObjectStoreConfig, tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "final" / "model.safetensors").write_bytes(b"\0" * 1024)
    (run / "final" / "config.json").write_text("{}")
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events.out").write_bytes(b"tb")
    (run / "checkpoints").mkdir()  # not an output: stays on the volume
    cfg = job(store, output={"uri": f"s3://{BUCKET}/team-a/sft-1"})
    written = upload_outputs(run, cfg)
    listed = client(store).list_objects_v2(Bucket=BUCKET, Prefix="team-a/sft-1/")
    keys = sorted(o["Key"] for o in listed["Contents"])
    assert (
        keys
        == sorted(written)
        == [
            "team-a/sft-1/final/config.json",
            "team-a/sft-1/final/model.safetensors",
            "team-a/sft-1/metrics.jsonl",
            "team-a/sft-1/tensorboard/events.out",
        ]
    )
    body = client(store).get_object(Bucket=BUCKET, Key="team-a/sft-1/final/model.safetensors")
    assert body["Body"].read() == b"\0" * 1024


def test_no_output_uri_uploads_nothing(store: ObjectStoreConfig, tmp_path: Path) -> None:
    assert upload_outputs(tmp_path, job(store)) == []


def test_s3_inputs_are_fetched_once_and_the_config_points_at_them(
    store: ObjectStoreConfig, tmp_path: Path
) -> None:
    s3 = client(store)
    s3.put_object(Bucket=BUCKET, Key="data/prompts.jsonl", Body=b'{"prompt": "hi"}\n')
    s3.put_object(Bucket=BUCKET, Key="models/actor/config.json", Body=b"{}")
    s3.put_object(Bucket=BUCKET, Key="models/actor/model.safetensors", Body=b"w")
    cfg = job(
        store,
        data={"train": [{"path": f"s3://{BUCKET}/data/prompts.jsonl"}]},
        models={"actor": {"pretrained": f"s3://{BUCKET}/models/actor"}},
    )
    local = fetch_inputs(cfg, tmp_path / "cache")
    data = Path(str(local.data.train[0].path))
    model = Path(str(local.models.actor.pretrained))
    assert data.read_text() == '{"prompt": "hi"}\n'
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "model.safetensors"]
    # A second fetch reuses the copies (the object changed, the cache did not).
    s3.put_object(Bucket=BUCKET, Key="data/prompts.jsonl", Body=b"changed")
    assert fetch_inputs(cfg, tmp_path / "cache").data.train[0].path == str(data)


def test_a_missing_object_names_the_location(store: ObjectStoreConfig, tmp_path: Path) -> None:
    cfg = job(store, data={"train": [{"path": f"s3://{BUCKET}/nope.jsonl"}]})
    with pytest.raises(InputLocationError, match=rf"cannot read s3://{BUCKET}/nope.jsonl"):
        fetch_inputs(cfg, tmp_path)


def test_pvc_locations_are_refused_outside_a_cluster(
    store: ObjectStoreConfig, tmp_path: Path
) -> None:
    cfg = job(store, data={"train": [{"path": "pvc://datasets/prompts.jsonl"}]})
    with pytest.raises(InputLocationError, match=r"pvc:// names a volume .*data\.train\[0\]\.path"):
        fetch_inputs(cfg, tmp_path)


def test_a_download_that_died_half_way_is_not_taken_for_a_copy(
    store: ObjectStoreConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlhf_trainer.objectstore as objectstore

    client(store).put_object(Bucket=BUCKET, Key="data/half.jsonl", Body=b'{"prompt": "x"}\n')
    cfg = job(store, data={"train": [{"path": f"s3://{BUCKET}/data/half.jsonl"}]})

    def dies(uri: Any, dest: Path, store: Any) -> Path:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text('{"prom')  # a truncated copy, then the pod goes
        raise ObjectStoreError("connection reset")

    monkeypatch.setattr(objectstore, "download", dies)
    with pytest.raises(ObjectStoreError):
        fetch_inputs(cfg, tmp_path)
    monkeypatch.undo()
    local = fetch_inputs(cfg, tmp_path)
    assert Path(str(local.data.train[0].path)).read_text() == '{"prompt": "x"}\n'
