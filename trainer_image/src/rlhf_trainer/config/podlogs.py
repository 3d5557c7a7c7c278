"""Where a job's logs are kept and how large they may grow (pure: shared by the operator, the
pods' log wrapper and `rlhf logs`).

On a cluster every container of a job's pods writes what `kubectl logs` would show into the
job's storage volume while it runs, so the logs outlive the pods (a pod killed mid-run keeps
what it wrote), attempt by attempt:

    <job>/logs/                          (pvc://<claim>/<job>/logs; output.uri's logs/ too)
      attempt-<N>/                       N: the attempt, the RayJob <job>-r<N> (0 first)
        events.jsonl                     the job's Kubernetes Events seen during the attempt
        trainer.jsonl                    the trainer driver's log records, one JSON a line
        <pod>/<container>.log            stdout and stderr of a container, timestamped
        <pod>/<container>.log.1 ... .N   older parts, rotated at `containerLogs.maxSize`

Rotation follows the kubelet's own container-log rotation (`containerLogMaxSize`,
`containerLogMaxFiles`: 10Mi and 5 by default), so one container keeps at most
`maxFiles x maxSize` per attempt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field

from .base import ConfigModel
from .memory import quantity_bytes
from .names import QUANTITY_MAX_LENGTH, STORAGE_QUANTITY

LOGS_DIR = "logs"
EVENTS_FILE = "events.jsonl"
TRAINER_LOG = "trainer.jsonl"
LOG_SUFFIX = ".log"
# In every pod of a cluster job: the attempt's directory (`<storage>/<job>/logs/attempt-<N>`).
LOGS_DIR_ENV = "RLHF_LOGS_DIR"
# In every pod: the pod's own name (downward API), the directory of its containers' logs.
POD_NAME_ENV = "RLHF_POD_NAME"
# Each line of a container's log file starts with its time (RFC 3339, UTC) and a space, as
# `kubectl logs --timestamps` prints it; `rlhf logs` strips it unless asked for.
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z ")

_ATTEMPT = re.compile(r"^attempt-(0|[1-9][0-9]*)$")
_PART = re.compile(r"^(?P<container>.+?)\.log(\.(?P<part>[1-9][0-9]*))?$")


class ContainerLogsConfig(ConfigModel):
    """`spec.logging.containerLogs`: the size bound of each container's log on the volume."""

    max_size: str = Field(
        "10Mi",
        max_length=QUANTITY_MAX_LENGTH,
        pattern=STORAGE_QUANTITY,
        description="A container's log file is rotated when it reaches this size (as the "
        "kubelet's containerLogMaxSize).",
    )
    max_files: int = Field(
        5,
        ge=1,
        le=100,
        description="Files kept per container and attempt, the current one included (as the "
        "kubelet's containerLogMaxFiles); the oldest part is dropped beyond.",
    )

    @property
    def max_bytes(self) -> int:
        return max(1, int(quantity_bytes(self.max_size)))

    @property
    def backups(self) -> int:
        """logging.handlers.RotatingFileHandler's backupCount."""
        return self.max_files - 1


def attempt_dir(attempt: int) -> str:
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    return f"attempt-{attempt}"


def attempt_of(name: str) -> int | None:
    """N of a directory named `attempt-<N>`, else None."""
    match = _ATTEMPT.match(name)
    return int(match.group(1)) if match else None


def container_log(attempt: int, pod: str, container: str) -> str:
    """A container's current log file, relative to the job's logs directory."""
    return f"{attempt_dir(attempt)}/{pod}/{container}{LOG_SUFFIX}"


class LogKind(StrEnum):
    CONTAINER = "container"
    EVENTS = "events"
    TRAINER = "trainer"


@dataclass(frozen=True, order=True)
class LogFile:
    """One file of a job's logs. `part`: 0 for a current file, k for the k-th rotated one
    (`.log.k`, older as k grows)."""

    attempt: int
    kind: LogKind
    pod: str = ""
    container: str = ""
    part: int = 0

    @property
    def path(self) -> str:
        """Relative to the job's logs directory."""
        base = attempt_dir(self.attempt)
        if self.kind is LogKind.EVENTS:
            return f"{base}/{EVENTS_FILE}"
        if self.kind is LogKind.TRAINER:
            return f"{base}/{TRAINER_LOG}"
        rotated = f".{self.part}" if self.part else ""
        return f"{base}/{self.pod}/{self.container}{LOG_SUFFIX}{rotated}"


def parse_log_path(relative: str) -> LogFile | None:
    """The log file a path relative to the logs directory names, or None for anything else."""
    parts = relative.strip("/").split("/")
    if not parts or not (match := _ATTEMPT.match(parts[0])):
        return None
    attempt = int(match.group(1))
    if len(parts) == 2 and parts[1] == EVENTS_FILE:
        return LogFile(attempt, LogKind.EVENTS)
    if len(parts) == 2 and parts[1] == TRAINER_LOG:
        return LogFile(attempt, LogKind.TRAINER)
    if len(parts) != 3 or not (part := _PART.match(parts[2])):
        return None
    index = int(part.group("part") or 0)
    return LogFile(attempt, LogKind.CONTAINER, parts[1], part.group("container"), index)


def reading_order(files: list[LogFile]) -> list[LogFile]:
    """Attempt by attempt: events, then each pod's containers (a container's rotated parts
    oldest first, the current file last), then the trainer's records."""
    kind_rank = {LogKind.EVENTS: 0, LogKind.CONTAINER: 1, LogKind.TRAINER: 2}
    return sorted(files, key=lambda f: (f.attempt, kind_rank[f.kind], f.pod, f.container, -f.part))
