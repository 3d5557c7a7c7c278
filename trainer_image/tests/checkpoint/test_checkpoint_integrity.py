"""Each checkpoint carries a manifest of its files; data is flushed before the atomic publish;
a damaged newest checkpoint is skipped for the one before it (with a warning), never loaded."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from rlhf_trainer import checkpoint_manifest, checkpoint_store
from rlhf_trainer.checkpoint import COMPLETE_MARKER, CheckpointManager, CheckpointOwner
from rlhf_trainer.checkpoint_store import CheckpointRefused
from rlhf_trainer.config import ResumePolicy

MIB = 1024 * 1024
BIG = 6 * MIB  # above the size hashed whole: its digest samples first, middle and last MiB


def write_shards(directory: Path) -> None:
    (directory / "actor").mkdir()
    (directory / "actor" / "shard.pt").write_bytes(os.urandom(BIG))
    (directory / "trainer_state.json").write_text('{"step": 1}')


def test_the_manifest_records_owner_order_and_files(tmp_path: Path) -> None:
    owner = CheckpointOwner("uid-a", {"algorithm.name": "grpo"})
    m = CheckpointManager(tmp_path, 3, owner)
    m.save(7, write_shards)
    path = m.save(8, write_shards)
    marker = json.loads((path / COMPLETE_MARKER).read_text())
    assert marker["jobUid"] == "uid-a" and marker["seq"] == 2 and marker["step"] == 8
    assert marker["fingerprint"] == {"algorithm.name": "grpo"}
    assert marker["files"]["actor/shard.pt"]["size"] == BIG
    assert set(marker["files"]) == {"actor/shard.pt", "trainer_state.json"}


def test_every_file_is_flushed_before_the_publishing_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_rename = checkpoint_manifest.fsync_file, os.rename

    def fsync(path: Path) -> None:
        events.append(("fsync", Path(path).name))
        real_fsync(path)

    def rename(src: Any, dst: Any) -> None:
        events.append(("rename", Path(dst).name))
        real_rename(src, dst)

    monkeypatch.setattr(checkpoint_manifest, "fsync_file", fsync)
    monkeypatch.setattr(checkpoint_store, "fsync_file", fsync)
    monkeypatch.setattr(checkpoint_store.os, "rename", rename)
    CheckpointManager(tmp_path, 3).save(1, write_shards)
    publish = events.index(("rename", "step-000001"))
    flushed = {name for kind, name in events[:publish] if kind == "fsync"}
    assert {"shard.pt", "trainer_state.json", COMPLETE_MARKER} <= flushed


def damage(path: Path, how: str) -> None:
    shard = path / "actor" / "shard.pt"
    if how == "truncated":
        with open(shard, "r+b") as f:
            f.truncate(BIG // 2)
    elif how == "missing-file":
        (path / "trainer_state.json").unlink()
    elif how == "rewritten-same-size":
        with open(shard, "r+b") as f:
            f.seek(BIG - 10)
            f.write(b"0123456789")
    elif how == "torn-marker":
        marker = path / COMPLETE_MARKER
        marker.write_text(marker.read_text()[:40])


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("truncated", "actor/shard.pt has 3145728 bytes, 6291456 when published"),
        ("missing-file", "trainer_state.json is missing"),
        ("rewritten-same-size", "actor/shard.pt differs from what was published"),
        ("torn-marker", "its COMPLETE marker is unreadable"),
    ],
)
def test_a_damaged_latest_is_skipped_for_the_previous_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str, why: str
) -> None:
    m = CheckpointManager(tmp_path, 5)
    m.save(1, write_shards)
    damage(m.save(2, write_shards), how)
    with caplog.at_level(logging.WARNING):
        point = m.resume_point(ResumePolicy.AUTO, None)
    assert point is not None and point.step == 1
    assert "step-000002 is damaged" in caplog.text and why in caplog.text
    # Kept to inspect, out of the way: never a candidate again, never counted by rotation.
    assert [p.name.startswith("corrupt-step-000002-") for p in tmp_path.iterdir()].count(True)
    assert [r.step for r in m.checkpoints()] == [1]


def test_nothing_intact_means_a_fresh_start(tmp_path: Path) -> None:
    m = CheckpointManager(tmp_path, 5)
    damage(m.save(1, write_shards), "truncated")
    assert m.resume_point(ResumePolicy.AUTO, None) is None


def test_a_damaged_checkpoint_named_by_resume_from_is_refused(tmp_path: Path) -> None:
    m = CheckpointManager(tmp_path, 5)
    m.save(1, write_shards)
    damage(m.save(2, write_shards), "truncated")
    with pytest.raises(CheckpointRefused, match=r"'step-000002'.* is damaged: actor/shard\.pt has"):
        m.resume_point(ResumePolicy.AUTO, "step-000002")


def test_an_older_trainers_checkpoint_is_taken_only_when_named(tmp_path: Path) -> None:
    legacy = tmp_path / "step-000004"
    legacy.mkdir()
    (legacy / COMPLETE_MARKER).write_text('{"step": 4, "time": "2026-01-01T00:00:00Z"}\n')
    m = CheckpointManager(tmp_path, 5)
    assert m.resume_point(ResumePolicy.AUTO, None) is None  # no owner recorded: not ours
    assert (tmp_path / "previous-unknown" / "step-000004").is_dir()
    point = m.resume_point(ResumePolicy.AUTO, "previous-unknown/step-000004")
    assert point is not None and point.step == 4
