"""What a checkpoint says about itself: whose it is, which config it needs, and what its files
were when it was published. Pure (no torch): `rlhf_trainer.checkpoint` writes and reads it.

The manifest is the checkpoint's COMPLETE marker, written last (after every data file was
flushed to disk) and renamed into place with the directory. It records:

- `jobUid`: the RLHFJob's UID (`RLHF_JOB_UID`, set by the operator; absent in a local run). A
  job deleted and created again under the same name gets a new UID and the same storage
  directory: the UID tells its checkpoints from its predecessor's.
- `fingerprint`: the config parts a resume must find unchanged (`resume_fingerprint`).
- `seq`: the publish order in the directory. Rotation and "the newest" go by it, not by the
  step: a run resumed from an older checkpoint writes lower steps than ones already there,
  and the checkpoint just written must count as the newest.
- `files`: every data file's size and a digest of samples of it (`file_digest`).
- `score` (with `checkpoint.keepBest`): the metric and its value at this step, when the step
  reported it; rotation keeps the best-scoring checkpoint (`checkpoint_best`).

Why samples: a checkpoint of a 7B model with its Adam states is ~100 GB, on a network volume.
Hashing it whole would read it all again after every save and at every resume (minutes on the
driver, and the network's bandwidth). The failures to catch are a copy or a save cut short
(sizes), a file replaced or rewritten by something else (size + first, middle and last MiB),
and files missing; a flipped bit in the middle of a shard is the storage's to catch (ZFS/Ceph
checksums), not something a sampled digest claims to see. Small files (trainer state, RNG,
DeepSpeed's metadata) are hashed whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlhf_trainer.config import JobConfig
from rlhf_trainer.config.checkpoint import JOB_UID_ENV

from .checkpoint_best import Score

DIGEST_SCHEME = "sha256:first+middle+last-1MiB"
_SAMPLE = 1024 * 1024
_WHOLE_UP_TO = 4 * _SAMPLE


def job_uid(env: Mapping[str, str] | None = None) -> str | None:
    """This run's RLHFJob UID, or None for a local run."""
    env = os.environ if env is None else env
    return env.get(JOB_UID_ENV) or None


def resume_fingerprint(cfg: JobConfig) -> dict[str, Any]:
    """The parts of a job a checkpoint is only valid for, as plain values (camelCase paths).

    In: what the saved state is *of* or shaped *by*. The trained models' sources (the saved
    weights are theirs; a LoRA adapter's shapes follow its config), the algorithm (which
    models exist, what the KL and reward-normaliser states mean), the training data and seed
    (the saved data position indexes that stream, in that shuffle order), and the ZeRO layout:
    `training.zeroStage`, `training.bf16` and the ranks of each trained role (DeepSpeed loads
    ZeRO shards only into the same data-parallel size and precision).
    Out, on purpose: what a resumed run may change, e.g. learning rates and clipping after a
    spike, `maxSteps` to train longer, sampling settings, the reference and reward sources
    (read again at start), checkpoint and logging settings.

    Computed from the job as written (before s3:// inputs become local paths, which may
    differ between attempts).
    """
    algo, t, p = cfg.algorithm.name, cfg.training, cfg.placement
    parts: dict[str, Any] = {
        "algorithm.name": algo.value,
        "models.actor": cfg.models.actor.to_manifest(),
        "data.train": [source.to_manifest() for source in cfg.data.train],
        "training.seed": t.seed,
        "training.lora": t.lora.to_manifest() if t.lora is not None else None,
        "training.zeroStage": t.zero_stage,
        "training.bf16": t.bf16,
        "placement.actorGpus": p.actor_gpus,
    }
    if algo.needs_critic:
        parts["models.critic"] = cfg.models.resolved_critic().to_manifest()
        parts["placement.criticGpus"] = p.critic_gpus
    return parts


def fingerprint_changes(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """`field: saved -> current` for each part that differs."""
    keys = sorted(set(saved) | set(current))
    return [
        f"{k}: {_short(saved.get(k))} -> {_short(current.get(k))}"
        for k in keys
        if saved.get(k) != current.get(k)
    ]


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def file_digest(path: Path, size: int) -> str:
    """sha256 of the whole file when small, else of its first, middle and last MiB."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= _WHOLE_UP_TO:
            h.update(f.read())
        else:
            for offset in (0, (size - _SAMPLE) // 2, size - _SAMPLE):
                f.seek(offset)
                h.update(f.read(_SAMPLE))
    return h.hexdigest()


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry durable; not every platform lets a directory be opened,
    which is fine."""
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


def fsync_tree(root: Path) -> None:
    """Flush every file and directory under `root` to disk, so that a rename published after
    it never points at data a power cut would lose (rename is atomic, not durable). The ranks
    call it on what they saved too: on a network volume, a file is flushed by the client that
    wrote it."""
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            if not path.is_symlink():
                fsync_file(path)
        fsync_dir(Path(directory))


def describe_files(root: Path, *, sync: bool) -> dict[str, dict[str, Any]]:
    """Every regular file under `root` (relative path -> size and digest); with `sync`, each
    is flushed to disk first, so what the manifest describes is what a power cut leaves."""
    files: dict[str, dict[str, Any]] = {}
    for directory, _, names in os.walk(root):
        for name in sorted(names):
            path = Path(directory, name)
            if path.is_symlink():
                continue
            if sync:
                fsync_file(path)
            size = path.stat().st_size
            files[str(path.relative_to(root))] = {"size": size, "digest": file_digest(path, size)}
        if sync:
            fsync_dir(Path(directory))
    return files


@dataclass(frozen=True)
class Manifest:
    step: int
    seq: int
    job_uid: str | None
    fingerprint: dict[str, Any]
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    written_at: str = ""
    # checkpoint.keepBest: the metric's value at this step, when it was reported.
    score: Score | None = None

    def to_json(self) -> str:
        scored = {"score": self.score.to_json()} if self.score is not None else {}
        return json.dumps(
            {
                **scored,
                "step": self.step,
                "seq": self.seq,
                "time": self.written_at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "jobUid": self.job_uid,
                "fingerprint": self.fingerprint,
                "digest": DIGEST_SCHEME,
                "files": self.files,
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def parse(cls, text: str) -> Manifest | None:
        """The manifest in a COMPLETE marker; None for a marker of an older trainer, which
        recorded only the step and time (no owner, no files)."""
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("step"), int):
            raise ValueError("not a checkpoint marker")
        if "files" not in data or data.get("digest") != DIGEST_SCHEME:
            return None
        return cls(
            step=data["step"],
            seq=int(data.get("seq", 0)),
            job_uid=data.get("jobUid"),
            fingerprint=dict(data.get("fingerprint") or {}),
            files=dict(data["files"]),
            written_at=str(data.get("time", "")),
            score=Score.parse(data.get("score")),
        )


def verify_files(root: Path, manifest: Manifest) -> list[str]:
    """What is wrong with the files of the checkpoint at `root` (empty: all as published)."""
    problems = []
    for name, expected in manifest.files.items():
        path = root / name
        try:
            size = path.stat().st_size
        except OSError:
            problems.append(f"{name} is missing")
            continue
        if size != expected["size"]:
            problems.append(f"{name} has {size} bytes, {expected['size']} when published")
        elif file_digest(path, size) != expected["digest"]:
            problems.append(f"{name} differs from what was published")
    return problems
