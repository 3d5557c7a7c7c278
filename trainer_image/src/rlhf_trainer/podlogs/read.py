"""Read a job's kept logs back (`rlhf logs`): from a directory (the job's storage volume
mounted or copied here, or a local run's directory) or from the bucket of `output.uri`.

    source = VolumeLogs(Path("/mnt/claim/my-job/logs"))  # or BucketLogs(uri, store)
    files = select(source.files(), attempt=1, pods=["worker"])
    for line in render(source, files): print(line)

Each file is printed under a header naming it (`==> attempt-1/<pod>/ray-worker.log <==`), a
container's rotated parts oldest first; Events as `kubectl get events` lines; the trainer's
records as `time level logger: message`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rlhf_trainer.config.locations import S3Uri
from rlhf_trainer.config.output import ObjectStoreConfig
from rlhf_trainer.config.podlogs import (
    TIMESTAMP,
    LogFile,
    LogKind,
    parse_log_path,
    reading_order,
)


class LogSource(Protocol):
    """A job's logs directory, wherever it is."""

    @property
    def where(self) -> str: ...

    def paths(self) -> list[str]:
        """Every file, relative to the logs directory."""
        ...

    def read(self, relative: str) -> bytes: ...


@dataclass(frozen=True)
class VolumeLogs:
    root: Path

    @property
    def where(self) -> str:
        return str(self.root)

    def paths(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return [str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file()]

    def read(self, relative: str) -> bytes:
        try:
            return (self.root / relative).read_bytes()
        except FileNotFoundError:  # rotated away while a pod still writes
            return b""


@dataclass(frozen=True)
class BucketLogs:
    uri: S3Uri
    store: ObjectStoreConfig | None

    @property
    def where(self) -> str:
        return str(self.uri)

    def paths(self) -> list[str]:
        from rlhf_trainer.objectstore import list_keys

        prefix = f"{self.uri.key.rstrip('/')}/" if self.uri.key else ""
        return [key[len(prefix) :] for key in list_keys(self.uri, self.store)]

    def read(self, relative: str) -> bytes:
        from rlhf_trainer.objectstore import read_object

        return read_object(self.uri.bucket, self.uri.child(relative).key, self.store)


def select(
    paths: Iterable[str],
    *,
    attempt: int | None = None,
    pods: Sequence[str] = (),
    containers: Sequence[str] = (),
    events: bool = True,
) -> list[LogFile]:
    """The log files to show, in reading order (pure). `pods`: a pod is shown when one of
    them is part of its name (`head`, `worker`, a whole name); with `pods` or `containers`
    only container logs are shown."""
    chosen: list[LogFile] = []
    for path in paths:
        found = parse_log_path(path)
        if found is None or (attempt is not None and found.attempt != attempt):
            continue
        if found.kind is not LogKind.CONTAINER:
            if events and not pods and not containers:
                chosen.append(found)
            continue
        if pods and not any(p in found.pod for p in pods):
            continue
        if containers and found.container not in containers:
            continue
        chosen.append(found)
    return reading_order(chosen)


def attempts(paths: Iterable[str]) -> list[int]:
    return sorted({f.attempt for p in paths if (f := parse_log_path(p)) is not None})


def event_line(record: dict[str, Any]) -> str:
    """One core/v1 Event as `kubectl get events` shows it: last seen, type, reason, object,
    message (pure)."""
    obj = record.get("involvedObject") or {}
    when = (
        record.get("lastTimestamp")
        or record.get("eventTime")
        or record.get("firstTimestamp")
        or (record.get("metadata") or {}).get("creationTimestamp")
        or "-"
    )
    count = record.get("count") or 1
    repeated = f" (x{count})" if count > 1 else ""
    what = f"{str(obj.get('kind', '')).lower()}/{obj.get('name', '')}"
    message = " ".join(str(record.get("message", "")).split())
    return f"{when} {record.get('type', '')} {record.get('reason', '')} {what}: {message}{repeated}"


def trainer_line(record: dict[str, Any]) -> str:
    """One of the trainer's records (trainer_log.py) as a line (pure)."""
    text = f"{record.get('time', '-')} {record.get('level', '')} {record.get('logger', '')}: "
    text += str(record.get("message", ""))
    if record.get("exception"):
        text += "\n" + str(record["exception"])
    return text


def _json_lines(data: bytes, show: Any) -> Iterator[str]:
    for raw in data.decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:  # a line cut by a kill mid-write
            yield raw
            continue
        yield show(record) if isinstance(record, dict) else raw


def lines_of(file: LogFile, data: bytes, *, timestamps: bool = False) -> Iterator[str]:
    """The lines of one file as `rlhf logs` prints them (pure)."""
    if file.kind is LogKind.EVENTS:
        yield from _json_lines(data, event_line)
        return
    if file.kind is LogKind.TRAINER:
        yield from _json_lines(data, trainer_line)
        return
    for line in data.decode("utf-8", errors="replace").splitlines():
        yield line if timestamps else TIMESTAMP.sub("", line, count=1)


def render(
    source: LogSource, files: Sequence[LogFile], *, timestamps: bool = False
) -> Iterator[str]:
    """Every chosen file under its header; a container's parts under one header."""
    shown: tuple[int, str, str, LogKind] | None = None
    for file in files:
        key = (file.attempt, file.pod, file.container, file.kind)
        if key != shown:
            current = LogFile(file.attempt, file.kind, file.pod, file.container).path
            yield f"==> {current} <=="
            shown = key
        yield from lines_of(file, source.read(file.path), timestamps=timestamps)
