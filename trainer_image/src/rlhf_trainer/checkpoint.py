"""The file-system side of checkpoints: atomic, rotated, never half-written.

Layout under the checkpoint root:

    step-000040/       a complete checkpoint (holds a COMPLETE marker, written last)
    step-000050/
    latest             text file naming the newest complete checkpoint ("step-000050")
    .tmp-step-...      a save in progress (or one that died); never read, removed on start-up

`CheckpointManager.save(step, write_fn)` lets `write_fn` fill a fresh temporary directory (the
DeepSpeed engines' own save, RNG states, `trainer_state.json`), marks it complete, renames it
into place (atomic on one file system), then replaces `latest` atomically (write a temp file,
`os.replace`) and removes checkpoints beyond the `keep` newest. A crash at any point leaves
either the previous state or the new one visible, never a mix; `latest()` trusts only
directories with the marker, so even a lost `latest` file or a stray directory is harmless.

`publish_dir(write_fn, final)` does the same for one directory that has no history, the final
HF export of a run: written beside it, flushed to disk, renamed into place.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

COMPLETE_MARKER = "COMPLETE"
LATEST_FILE = "latest"
TRAINER_STATE_FILE = "trainer_state.json"
RNG_STATE_FILE = "rng_state.pt"
_STEP_DIR = re.compile(r"^step-(\d+)$")
_TMP_PREFIX = ".tmp-"


class CheckpointRef(NamedTuple):
    step: int
    path: Path


def step_dir_name(step: int) -> str:
    return f"step-{step:06d}"


def _fsync_dir(path: Path) -> None:
    # Make a rename durable; not every platform lets a directory be opened, which is fine.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Flush every file and directory under `root` to disk, so that a rename published after
    it never points at data a power cut would lose (rename is atomic, not durable)."""
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            if path.is_symlink():
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(directory))


def publish_dir(write_fn: Callable[[Path], None], final: Path) -> Path:
    """Let `write_fn(tmp)` fill a temporary directory beside `final`, flush it to disk, then
    rename it to `final` (replacing an older one), so `final` is never seen half-written: a
    reader finds the old export, the new one, or (between the two renames) none, never a mix.
    On failure the temporary directory is removed and an older `final` is left as it was."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{_TMP_PREFIX}{final.name}.{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    old = None
    try:
        write_fn(tmp)
        _fsync_tree(tmp)
        if final.exists():
            # A directory cannot be renamed over a non-empty one: move the old one aside.
            old = final.with_name(f"{_TMP_PREFIX}old-{final.name}.{uuid.uuid4().hex[:8]}")
            os.rename(final, old)
        os.rename(tmp, final)
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not final.exists():
            os.rename(old, final)  # the new one never arrived: put the old one back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that readers see the old or the new content, never half."""
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}.{uuid.uuid4().hex[:8]}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class CheckpointManager:
    def __init__(self, root: str | Path, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1 (checkpoint.keep); got {keep}")
        self.root = Path(root)
        self.keep = keep
        self.root.mkdir(parents=True, exist_ok=True)
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        # Saves that died mid-way: their directories were never renamed into place.
        for entry in self.root.iterdir():
            if entry.name.startswith(_TMP_PREFIX):
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def checkpoints(self) -> list[CheckpointRef]:
        """Complete checkpoints, oldest first."""
        found = []
        for entry in self.root.iterdir():
            match = _STEP_DIR.match(entry.name)
            if match and entry.is_dir() and (entry / COMPLETE_MARKER).is_file():
                found.append(CheckpointRef(int(match.group(1)), entry))
        return sorted(found)

    def latest(self) -> CheckpointRef | None:
        """The newest complete checkpoint (the `latest` pointer if valid, else a scan)."""
        pointer = self.root / LATEST_FILE
        try:
            name = pointer.read_text(encoding="utf-8").strip()
        except OSError:
            name = ""
        match = _STEP_DIR.match(name)
        if match and (self.root / name / COMPLETE_MARKER).is_file():
            return CheckpointRef(int(match.group(1)), self.root / name)
        complete = self.checkpoints()
        return complete[-1] if complete else None

    def save(self, step: int, write_fn: Callable[[Path], None]) -> Path:
        """Let `write_fn(tmp_dir)` write a checkpoint, then publish it atomically as step-N."""
        if step < 0:
            raise ValueError(f"step must be >= 0; got {step}")
        final = self.root / step_dir_name(step)
        tmp = self.root / f"{_TMP_PREFIX}{final.name}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            write_fn(tmp)
            marker = {"step": step, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (tmp / COMPLETE_MARKER).write_text(json.dumps(marker) + "\n")
            self._publish(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        write_text_atomic(self.root / LATEST_FILE, final.name + "\n")
        self._rotate()
        return final

    def _publish(self, tmp: Path, final: Path) -> None:
        old = None
        if final.exists():
            # Saving the same step again (e.g. a final save after a resume): move the old one
            # aside first, since a directory cannot be renamed over a non-empty one.
            old = self.root / f"{_TMP_PREFIX}old-{final.name}.{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
        os.rename(tmp, final)
        _fsync_dir(self.root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def _rotate(self) -> None:
        complete = self.checkpoints()
        for ref in complete[: max(0, len(complete) - self.keep)]:
            # Unmark first: a half-deleted directory must not look complete to a reader.
            (ref.path / COMPLETE_MARKER).unlink(missing_ok=True)
            shutil.rmtree(ref.path, ignore_errors=True)


# --- RNG states ---------------------------------------------------------------------------


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy and torch (CPU, and CUDA when present) generator states."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_rng_state(directory: Path, name: str = RNG_STATE_FILE) -> Path:
    path = Path(directory) / name
    torch.save(capture_rng_state(), path)
    return path


def load_rng_state(directory: Path, name: str = RNG_STATE_FILE) -> None:
    # Our own file, written by save_rng_state: it holds Python tuples and NumPy arrays.
    restore_rng_state(torch.load(Path(directory) / name, weights_only=False))


# --- trainer_state.json -------------------------------------------------------------------


@dataclass(frozen=True)
class TrainerState:
    """What the driver needs to continue: progress, data position, controllers' states."""

    step: int = 0
    data_position: int = 0
    samples_seen: int = 0
    kl_coef: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def save_trainer_state(directory: Path, state: TrainerState) -> Path:
    path = Path(directory) / TRAINER_STATE_FILE
    path.write_text(json.dumps(asdict(state), indent=2, sort_keys=True) + "\n")
    return path


def load_trainer_state(directory: Path) -> TrainerState:
    path = Path(directory) / TRAINER_STATE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read the trainer state: {err}") from err
    known = set(TrainerState.__dataclass_fields__)
    return TrainerState(**{k: v for k, v in data.items() if k in known})
