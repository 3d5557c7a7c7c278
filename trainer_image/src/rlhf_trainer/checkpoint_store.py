"""A job's checkpoint directory: atomic saves, rotation by publish order, and resumes that
take only a checkpoint of this job, written for this config, whose files are all there.

Layout under the checkpoint root:

    step-000040/       a complete checkpoint: its COMPLETE marker (the manifest) is written last
    step-000050/
    latest             text file naming the newest checkpoint (for people; never read)
    previous-<uid>/    checkpoints of an earlier job of the same name, moved out of the way
    corrupt-step-...   a checkpoint whose files no longer match its manifest, kept to inspect
    .tmp-step-...      a save in progress (or one that died); never read, removed on start-up

`save(step, write_fn)` lets `write_fn` fill a fresh temporary directory (the DeepSpeed engines'
own save, RNG states, `trainer_state.json`), flushes every file to disk while it records their
sizes and digests in the manifest, writes the manifest (flushed too), renames the directory into
place (atomic on one file system), and removes the checkpoints beyond the `keep` most recently
published, except the best-scoring one with `checkpoint.keepBest` (`save(..., score=)` records
each checkpoint's score in its manifest, so a resumed run knows the best too). A crash at
any point leaves the previous state or the new one visible, never a mix.

`resume_point` picks what a run continues from (see its docstring); the checks it makes are
what keep a re-created job (same name, same storage, new UID) from resuming its predecessor,
and a truncated checkpoint from being loaded.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rlhf_trainer.config import RESUME_LATEST, KeepBest, ResumePolicy
from rlhf_trainer.config.outcome import InvalidSpecError

from .checkpoint_best import BestCheckpoint, Candidate, Score, best_index, to_remove
from .checkpoint_manifest import (
    Manifest,
    describe_files,
    fingerprint_changes,
    fsync_dir,
    fsync_file,
    verify_files,
)

log = logging.getLogger(__name__)

COMPLETE_MARKER = "COMPLETE"
LATEST_FILE = "latest"
TMP_PREFIX = ".tmp-"
_STEP_DIR = re.compile(r"^step-(\d+)$")


class CheckpointRef(NamedTuple):
    step: int
    path: Path


class CheckpointRefused(InvalidSpecError, ValueError):
    """The checkpoint this run would resume from cannot be used as the job is written: it
    needs another config, or the one `checkpoint.resumeFrom` names is missing or damaged."""


@dataclass(frozen=True)
class CheckpointOwner:
    """Who writes: the RLHFJob's UID (None: a local run) and its `resume_fingerprint`."""

    job_uid: str | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Found:
    ref: CheckpointRef
    manifest: Manifest | None  # None: written by an older trainer (no owner, no file list)

    @property
    def order(self) -> tuple[int, int]:
        return (self.manifest.seq if self.manifest else 0, self.ref.step)


def _candidates(found: list[_Found]) -> list[Candidate]:
    return [Candidate(f.ref.step, f.manifest.score if f.manifest else None) for f in found]


def step_dir_name(step: int) -> str:
    return f"step-{step:06d}"


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that readers see the old or the new content, never half."""
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}.{uuid.uuid4().hex[:8]}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class CheckpointManager:
    def __init__(
        self,
        root: str | Path,
        keep: int,
        owner: CheckpointOwner | None = None,
        keep_best: KeepBest | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1 (checkpoint.keep); got {keep}")
        self.root = Path(root)
        self.keep = keep
        self.owner = owner if owner is not None else CheckpointOwner()
        self.keep_best = keep_best
        self.root.mkdir(parents=True, exist_ok=True)
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        # Saves that died mid-way: their directories were never renamed into place.
        for entry in self.root.iterdir():
            if entry.name.startswith(TMP_PREFIX):
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    # --- what is there ----------------------------------------------------------------------
    def _scan(self) -> tuple[list[_Found], list[tuple[Path, str]]]:
        """Complete checkpoints, oldest published first; and step directories whose marker
        is there but unreadable (with why)."""
        found, broken = [], []
        for entry in self.root.iterdir():
            match = _STEP_DIR.match(entry.name)
            marker = entry / COMPLETE_MARKER
            if not (match and entry.is_dir() and marker.is_file()):
                continue
            try:
                manifest = Manifest.parse(marker.read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:  # a torn marker: JSONDecodeError is one
                broken.append((entry, f"its {COMPLETE_MARKER} marker is unreadable ({err})"))
                continue
            found.append(_Found(CheckpointRef(int(match.group(1)), entry), manifest))
        return sorted(found, key=lambda f: f.order), broken

    def checkpoints(self) -> list[CheckpointRef]:
        """Complete checkpoints, oldest published first."""
        return [f.ref for f in self._scan()[0]]

    def latest(self) -> CheckpointRef | None:
        """The most recently published complete checkpoint."""
        complete = self.checkpoints()
        return complete[-1] if complete else None

    def best(self) -> BestCheckpoint | None:
        """With `keep_best`: the complete checkpoint that scored best on its metric."""
        found = self._scan()[0]
        index = best_index(_candidates(found), self.keep_best)
        if index is None:
            return None
        manifest = found[index].manifest
        if manifest is None or manifest.score is None:  # best_index took a scored one
            return None
        ref = found[index].ref
        return BestCheckpoint(ref.step, ref.path, manifest.score.metric, manifest.score.value)

    # --- saving -----------------------------------------------------------------------------
    def save(
        self, step: int, write_fn: Callable[[Path], None], *, score: float | None = None
    ) -> Path:
        """Let `write_fn(tmp_dir)` write a checkpoint, then publish it atomically as step-N;
        `score`: the keepBest metric's value at this step (None: not reported)."""
        if step < 0:
            raise ValueError(f"step must be >= 0; got {step}")
        final = self.root / step_dir_name(step)
        tmp = self.root / f"{TMP_PREFIX}{final.name}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            write_fn(tmp)
            seq = 1 + max((f.order[0] for f in self._scan()[0]), default=0)
            files = describe_files(tmp, sync=True)
            scored = None
            if self.keep_best is not None and score is not None:
                scored = Score(self.keep_best.metric, float(score))
            manifest = Manifest(
                step, seq, self.owner.job_uid, self.owner.fingerprint, files, score=scored
            )
            (tmp / COMPLETE_MARKER).write_text(manifest.to_json() + "\n", encoding="utf-8")
            fsync_file(tmp / COMPLETE_MARKER)
            fsync_dir(tmp)
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
            old = self.root / f"{TMP_PREFIX}old-{final.name}.{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
        os.rename(tmp, final)
        fsync_dir(self.root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def _rotate(self) -> None:
        # By publish order: the checkpoint just written is the newest even when a resumed run
        # writes lower steps than older ones still there.
        found = self._scan()[0]
        for index in to_remove(_candidates(found), self.keep, self.keep_best):
            ref = found[index].ref
            # Unmark first: a half-deleted directory must not look complete to a reader.
            (ref.path / COMPLETE_MARKER).unlink(missing_ok=True)
            shutil.rmtree(ref.path, ignore_errors=True)

    # --- resuming ---------------------------------------------------------------------------
    def resume_point(
        self, resume: ResumePolicy = ResumePolicy.AUTO, resume_from: str | None = None
    ) -> CheckpointRef | None:
        """The checkpoint to continue from; None: start fresh.

        Unless `resume_from` names one, checkpoints another job wrote (another UID, or none
        recorded) are moved to `previous-<uid>/` first: this job neither resumes them nor
        overwrites or rotates them away. Then (policy `auto`) the newest of this job's own,
        `resume_from: latest` the newest of any owner, whose files match its manifest; one
        that does not is set aside as `corrupt-...` with a warning and the one before it is
        tried. A `resume_from` path must be complete and intact. The checkpoint taken must have
        been written for the same `resume_fingerprint`: else `CheckpointRefused`, naming what
        changed.
        """
        if resume_from is None or resume is ResumePolicy.NEVER:
            self._set_aside_foreign()
        if resume is ResumePolicy.NEVER:
            return None
        if resume_from is not None and resume_from != RESUME_LATEST:
            return self._named(resume_from)
        complete, broken = self._scan()
        for path, why in broken:
            self._set_aside_corrupt(path, why)
        for found in reversed(complete):
            self._check_fingerprint(found)
            problems = self._damage(found, explicit=resume_from is not None)
            if not problems:
                return found.ref
            self._set_aside_corrupt(found.ref.path, "; ".join(problems))
        return None

    def _is_own(self, found: _Found) -> bool:
        return found.manifest is not None and found.manifest.job_uid == self.owner.job_uid

    def _set_aside_foreign(self) -> None:
        moved: dict[Path, list[str]] = {}
        for found in self._scan()[0]:
            if self._is_own(found):
                continue
            uid = found.manifest.job_uid if found.manifest else None
            dest = self.root / f"previous-{uid or 'unknown'}"
            dest.mkdir(exist_ok=True)
            target = dest / found.ref.path.name
            if target.exists():
                target = dest / f"{found.ref.path.name}-{uuid.uuid4().hex[:8]}"
            os.rename(found.ref.path, target)
            moved.setdefault(dest, []).append(target.name)
        for dest, names in moved.items():
            fsync_dir(self.root)
            log.warning(
                "checkpoints %s in %s were written by another job (%s); this job (%s) does "
                "not resume them: moved to %s. To continue from one, set "
                "checkpoint.resumeFrom: %s/%s",
                ", ".join(sorted(names)),
                self.root,
                dest.name.removeprefix("previous-").replace("unknown", "no UID recorded"),
                f"UID {self.owner.job_uid}" if self.owner.job_uid else "a local run",
                dest,
                dest.name,
                sorted(names)[-1],
            )

    def _set_aside_corrupt(self, path: Path, why: str) -> None:
        target = self.root / f"corrupt-{path.name}-{uuid.uuid4().hex[:8]}"
        os.rename(path, target)
        fsync_dir(self.root)
        log.warning(
            "checkpoint %s is damaged (%s): skipped for the one before it, and kept as %s to "
            "inspect",
            path,
            why,
            target,
        )

    def _damage(self, found: _Found, *, explicit: bool) -> list[str]:
        if found.manifest is None:
            if not explicit:  # unreachable for own checkpoints: they always have a manifest
                return ["it has no manifest"]
            log.warning(
                "checkpoint %s was written by an older trainer: it has no manifest, so its "
                "owner, config and files cannot be checked",
                found.ref.path,
            )
            return []
        return verify_files(found.ref.path, found.manifest)

    def _check_fingerprint(self, found: _Found) -> None:
        if found.manifest is None:
            return
        changes = fingerprint_changes(found.manifest.fingerprint, self.owner.fingerprint)
        if changes:
            raise CheckpointRefused(
                f"checkpoint {found.ref.path} was written for another config, which a resume "
                f"needs unchanged (it shapes the saved state): {'; '.join(changes)}. Restore "
                "those fields, or start fresh with checkpoint.resume: never; to start from "
                "its weights with this config, point models.actor.pretrained at an HF export"
            )

    def _named(self, resume_from: str) -> CheckpointRef:
        path = Path(resume_from).expanduser()
        path = path if path.is_absolute() else self.root / path
        marker = path / COMPLETE_MARKER
        where = f"checkpoint.resumeFrom: {resume_from!r} ({path})"
        if not marker.is_file():
            raise CheckpointRefused(f"{where} is not a complete checkpoint (no {COMPLETE_MARKER})")
        try:
            manifest = Manifest.parse(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise CheckpointRefused(f"{where}: its {COMPLETE_MARKER} is unreadable: {err}") from err
        match = _STEP_DIR.match(path.name)
        step = manifest.step if manifest else int(match.group(1)) if match else -1
        if step < 0:
            raise CheckpointRefused(f"{where}: not a step-N checkpoint directory")
        found = _Found(CheckpointRef(step, path), manifest)
        self._check_fingerprint(found)
        problems = self._damage(found, explicit=True)
        if problems:
            raise CheckpointRefused(f"{where} is damaged: {'; '.join(problems)}")
        return found.ref
