"""The W&B sink for real: wandb (the trainer extra installs it) in offline mode writes the run
to `<run_dir>/wandb/offline-run-*/run-*.wandb`, what `wandb sync` uploads later. The file is
read back record by record and the metrics, the job's config and the summary checked.

The file is LevelDB's log format with W&B's 7-byte header (`:W&B`, magic 0xBEE1, version 0):
32 KiB blocks of records, each a 7-byte header (CRC, little-endian length, type: 1 full,
2 first, 3 middle, 4 last) and a piece of a serialised `wandb_internal_pb2.Record`. wandb
0.31 reads it only in its Go core, so the test reads it here."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from rlhf_trainer.config import LoggingConfig
from rlhf_trainer.reporting.reporter import build_reporter

wandb = pytest.importorskip("wandb")
pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")

pytestmark = pytest.mark.timeout(300)

_HEADER, _BLOCK, _RECORD_HEADER = 7, 32768, 7


def records(path: Path) -> list[Any]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    out, pending, offset = [], b"", _HEADER
    while offset + _RECORD_HEADER <= len(data):
        left = _BLOCK - offset % _BLOCK
        if left < _RECORD_HEADER:  # the block's trailer: padding
            offset += left
            continue
        length, kind = struct.unpack_from("<HB", data, offset + 4)
        piece = data[offset + _RECORD_HEADER : offset + _RECORD_HEADER + length]
        offset += _RECORD_HEADER + length
        if kind == 0 and length == 0:  # zero padding at the end
            break
        pending = piece if kind in (1, 2) else pending + piece
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def _items(items: Any) -> dict[str, Any]:
    return {"/".join([i.key, *i.nested_key]).strip("/"): json.loads(i.value_json) for i in items}


@pytest.fixture
def wandb_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return tmp_path / "run"


def test_offline_run_holds_the_metrics_config_and_summary(wandb_home: Path) -> None:
    run_dir = wandb_home
    run_dir.mkdir()
    cfg = LoggingConfig.model_validate(
        {"tensorboard": False, "wandb": {"project": "tiny", "runName": "r1", "mode": "offline"}}
    )
    manifest = {"kind": "RLHFJob", "spec": {"algorithm": {"name": "ppo", "klCoef": 0.01}}}
    reporter = build_reporter(cfg, run_dir, config=manifest, console=io.StringIO(), env={})
    for step in (1, 2, 3):
        timings = {"generation": 0.5, "training": 0.25, "total": 1.0}
        reporter.on_step(step, 3, {"reward": 0.1 * step, "kl": 0.01}, timings, 8)
        if step == 2:  # as the driver does: after the step's metrics
            reporter.on_checkpoint(2, run_dir / "checkpoints" / "step-2")
    reporter.close()

    [run_file] = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    found = records(run_file)
    kinds = [r.WhichOneof("record_type") for r in found]
    run = next(r.run for r in found if r.WhichOneof("record_type") == "run")
    assert (run.project, run.display_name) == ("tiny", "r1")
    config = _items(run.config.update)
    for r in found:
        if r.WhichOneof("record_type") == "config":
            config |= _items(r.config.update)
    assert config["spec"] == manifest["spec"] and config["kind"] == "RLHFJob"

    history = [_items(r.history.item) for r in found if r.WhichOneof("record_type") == "history"]
    rewards = {h["_step"]: h["metrics/reward"] for h in history if "metrics/reward" in h}
    assert rewards == pytest.approx({1: 0.1, 2: 0.2, 3: 0.3})
    assert all(h["time/generation"] == 0.5 for h in history if "time/generation" in h)
    assert any(h.get("perf/samples_per_second") == 8.0 for h in history)
    assert any(h.get("checkpoint_step") == 2 for h in history)

    assert "summary" in kinds and "exit" in kinds
    summary: dict[str, Any] = {}
    for r in found:
        if r.WhichOneof("record_type") == "summary":
            summary |= _items(r.summary.update)
    assert summary["metrics/reward"] == pytest.approx(0.3)
    assert summary["metrics/kl"] == pytest.approx(0.01)
