"""`rlhf logs FILE|--job NAME [--from DIR|s3://...] [--attempt N] [--pod P] [--container C]`:
print a job's kept logs after its pods, or the job itself, are gone.

Where they are read from: `--from` (a directory where the job's storage volume is mounted or
copied, holding `<job>/logs/`; or the job's `output.uri`, s3://, holding `logs/`), else the
manifest's `output.uri` when it has one (FILE gives it, with `objectStore`). On a cluster,
`status.output.logs` names the volume's location (`pvc://<claim>/<job>/logs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rlhf_trainer.config import load_file
from rlhf_trainer.config.locations import is_s3, parse_s3
from rlhf_trainer.config.output import ObjectStoreConfig
from rlhf_trainer.config.podlogs import LOGS_DIR, attempt_of

from .read import BucketLogs, LogSource, VolumeLogs, attempts, render, select


class LogsError(Exception):
    """What to give `rlhf logs` instead (the message says)."""


@dataclass(frozen=True)
class LogsRequest:
    file: str | None = None
    job: str | None = None
    source: str | None = None
    attempt: int | None = None
    pods: Sequence[str] = field(default_factory=tuple)
    containers: Sequence[str] = field(default_factory=tuple)
    timestamps: bool = False
    list_only: bool = False


def _job(request: LogsRequest) -> tuple[str, str | None, ObjectStoreConfig | None]:
    """(job name, output.uri, object store) from FILE, or the name of `--job`."""
    if request.file is None:
        if not request.job:
            raise LogsError("give a FILE (the job's manifest) or --job NAME")
        return request.job, None, None
    jobs = load_file(request.file)
    problems = [p for j in jobs for p in j.problems]
    if problems:
        raise LogsError(f"{request.file}: {problems[0]}")
    if len(jobs) != 1:
        raise LogsError(f"{request.file}: holds {len(jobs)} documents; give one job's manifest")
    if jobs[0].config is None:  # a pipeline: each stage is the RLHFJob <pipeline>-<stage>
        raise LogsError(
            f"{request.file} is a pipeline: give --job {jobs[0].name}-<stage> and --from"
        )
    cfg = jobs[0].config
    name = request.job or jobs[0].name
    return name, cfg.output.uri, cfg.object_store


def _directory(root: Path, name: str) -> Path:
    """The logs directory under `root`: `<root>/<job>/logs` (the volume), `<root>/logs` (the
    job's directory) or `root` itself."""
    for candidate in (root / name / LOGS_DIR, root / LOGS_DIR, root):
        if candidate.is_dir() and any(
            attempt_of(p.name) is not None for p in candidate.iterdir() if p.is_dir()
        ):
            return candidate
    raise LogsError(
        f"--from {root}: no logs of {name} there (looked for {root}/{name}/{LOGS_DIR}/attempt-*, "
        f"{root}/{LOGS_DIR}/attempt-* and {root}/attempt-*)"
    )


def locate(request: LogsRequest) -> LogSource:
    name, uri, store = _job(request)
    where = request.source
    if where is not None and is_s3(where):
        return BucketLogs(parse_s3(where).child(LOGS_DIR), store)
    if where is not None:
        return VolumeLogs(_directory(Path(where), name))
    if uri is not None:
        return BucketLogs(parse_s3(uri).child(LOGS_DIR), store)
    raise LogsError(
        f"where are {name}'s logs? give --from DIR (where its storage volume, "
        f"status.output.logs, is mounted or copied) or --from s3://... (its output.uri)"
    )


def run(request: LogsRequest, emit: Callable[[str], None]) -> int:
    """Print the chosen logs through `emit`; the exit code (1: nothing matched)."""
    source = locate(request)
    paths = source.paths()
    if not paths:
        raise LogsError(f"no logs in {source.where}")
    files = select(
        paths,
        attempt=request.attempt,
        pods=tuple(request.pods),
        containers=tuple(request.containers),
    )
    if not files:
        kept = ", ".join(str(a) for a in attempts(paths)) or "none"
        raise LogsError(f"no log in {source.where} matches (attempts kept: {kept})")
    if request.list_only:
        for file in files:
            emit(file.path)
        return 0
    for line in render(source, files, timestamps=request.timestamps):
        emit(line)
    return 0
