"""Checkpoints: the directory of a job's checkpoints (`checkpoint_store.CheckpointManager`,
re-exported here), what each one records about itself (`checkpoint_manifest`), the final
export's atomic publish, and the driver's own part of a checkpoint (RNG states,
`trainer_state.json`).

`publish_dir(write_fn, final)` publishes one directory that has no history, the final HF export
of a run: written beside it, flushed to disk, renamed into place.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlhf_trainer.config.checkpoint import JOB_UID_ENV

from .checkpoint_manifest import fsync_dir, fsync_tree, job_uid, resume_fingerprint
from .checkpoint_store import (
    COMPLETE_MARKER,
    LATEST_FILE,
    TMP_PREFIX,
    CheckpointManager,
    CheckpointOwner,
    CheckpointRef,
    CheckpointRefused,
    step_dir_name,
    write_text_atomic,
)

__all__ = [
    "COMPLETE_MARKER",
    "JOB_UID_ENV",
    "LATEST_FILE",
    "RNG_STATE_FILE",
    "TRAINER_STATE_FILE",
    "CheckpointManager",
    "CheckpointOwner",
    "CheckpointRef",
    "CheckpointRefused",
    "TrainerState",
    "capture_rng_state",
    "fsync_tree",
    "job_uid",
    "load_rng_state",
    "load_trainer_state",
    "publish_dir",
    "restore_rng_state",
    "resume_fingerprint",
    "save_rng_state",
    "save_trainer_state",
    "step_dir_name",
    "write_text_atomic",
]

TRAINER_STATE_FILE = "trainer_state.json"
RNG_STATE_FILE = "rng_state.pt"


def publish_dir(write_fn: Callable[[Path], None], final: Path) -> Path:
    """Let `write_fn(tmp)` fill a temporary directory beside `final`, flush it to disk, then
    rename it to `final` (replacing an older one), so `final` is never seen half-written: a
    reader finds the old export, the new one, or (between the two renames) none, never a mix.
    On failure the temporary directory is removed and an older `final` is left as it was."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{TMP_PREFIX}{final.name}.{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    old = None
    try:
        write_fn(tmp)
        fsync_tree(tmp)
        if final.exists():
            # A directory cannot be renamed over a non-empty one: move the old one aside.
            old = final.with_name(f"{TMP_PREFIX}old-{final.name}.{uuid.uuid4().hex[:8]}")
            os.rename(final, old)
        os.rename(tmp, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not final.exists():
            os.rename(old, final)  # the new one never arrived: put the old one back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


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
