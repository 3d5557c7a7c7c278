"""Checkpoints on disk: atomic publish, rotation, nothing half-written ever visible."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from rlhf_trainer.checkpoint import (
    COMPLETE_MARKER,
    LATEST_FILE,
    CheckpointManager,
    CheckpointRef,
    TrainerState,
    capture_rng_state,
    load_rng_state,
    load_trainer_state,
    restore_rng_state,
    save_rng_state,
    save_trainer_state,
)


def write_weights(text: str) -> Callable[[Path], None]:
    def write(directory: Path) -> None:
        (directory / "weights.txt").write_text(text)

    return write


def visible(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_save_publishes_a_complete_dir_and_the_latest_pointer(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    assert manager.latest() is None
    path = manager.save(7, write_weights("w7"))
    assert path == tmp_path / "step-000007"
    assert (path / "weights.txt").read_text() == "w7" and (path / COMPLETE_MARKER).is_file()
    assert (tmp_path / LATEST_FILE).read_text() == "step-000007\n"
    assert manager.latest() == CheckpointRef(7, path)
    step, where = manager.latest() or (None, None)
    assert (step, where) == (7, path)
    assert visible(tmp_path) == ["latest", "step-000007"]


def test_only_the_newest_are_kept(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=2)
    for step in (10, 20, 30, 40):
        manager.save(step, write_weights(f"w{step}"))
    assert [ref.step for ref in manager.checkpoints()] == [30, 40]
    assert visible(tmp_path) == ["latest", "step-000030", "step-000040"]


def test_a_failing_writer_leaves_nothing_behind(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(1, write_weights("w1"))

    def broken(directory: Path) -> None:
        (directory / "half.bin").write_bytes(b"x" * 10)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        manager.save(2, broken)
    assert visible(tmp_path) == ["latest", "step-000001"]
    assert manager.latest() == CheckpointRef(1, tmp_path / "step-000001")


@pytest.mark.parametrize(
    "damage",
    ["pointer-missing", "pointer-garbage", "pointer-to-incomplete", "unmarked-newer-dir"],
)
def test_latest_trusts_only_complete_checkpoints(tmp_path: Path, damage: str) -> None:
    manager = CheckpointManager(tmp_path, keep=5)
    manager.save(1, write_weights("w1"))
    manager.save(2, write_weights("w2"))
    pointer = tmp_path / LATEST_FILE
    if damage == "pointer-missing":
        pointer.unlink()
        expected = 2
    elif damage == "pointer-garbage":
        pointer.write_text("../../etc")
        expected = 2
    elif damage == "pointer-to-incomplete":
        (tmp_path / "step-000002" / COMPLETE_MARKER).unlink()
        expected = 1
    else:
        (tmp_path / "step-000009").mkdir()  # e.g. copied in by hand, or a partial rsync
        pointer.unlink()
        expected = 2
    latest = manager.latest()
    assert latest is not None and latest.step == expected


def test_saving_a_step_again_replaces_it(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(5, write_weights("first"))
    path = manager.save(5, write_weights("second"))
    assert (path / "weights.txt").read_text() == "second"
    assert visible(tmp_path) == ["latest", "step-000005"]


def test_a_process_killed_mid_save_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from rlhf_trainer.checkpoint import CheckpointManager
        manager = CheckpointManager(Path({str(tmp_path)!r}), keep=3)
        manager.save(1, lambda d: (d / "w").write_text("one"))
        def slow(d):
            (d / "w").write_text("two, partly")
            print("writing", flush=True)
            time.sleep(60)
        manager.save(2, slow)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert len(leftovers) == 1  # the dead save's directory, invisible to readers
    manager = CheckpointManager(tmp_path, keep=3)  # a restarted run
    assert manager.latest() == CheckpointRef(1, tmp_path / "step-000001")
    assert visible(tmp_path) == ["latest", "step-000001"]  # start-up removed the leftover


def test_keep_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"checkpoint\.keep"):
        CheckpointManager(tmp_path, keep=0)


def test_rng_states_round_trip(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    save_rng_state(tmp_path)
    expected = (random.random(), float(np.random.rand()), torch.rand(2).tolist())
    load_rng_state(tmp_path)
    assert (random.random(), float(np.random.rand()), torch.rand(2).tolist()) == expected
    state = capture_rng_state()
    first = torch.randn(3)
    restore_rng_state(state)
    assert torch.equal(torch.randn(3), first)


def test_trainer_state_round_trips_as_json(tmp_path: Path) -> None:
    state = TrainerState(
        step=12,
        data_position=96,
        samples_seen=384,
        kl_coef=0.02,
        metrics={"reward": 0.5},
        extra={"reward_norm": {"mean": 0.1, "count": 3}},
    )
    path = save_trainer_state(tmp_path, state)
    assert path.name == "trainer_state.json" and '"data_position": 96' in path.read_text()
    assert load_trainer_state(tmp_path) == state
    with pytest.raises(ValueError, match="cannot read the trainer state"):
        load_trainer_state(tmp_path / "nope")
