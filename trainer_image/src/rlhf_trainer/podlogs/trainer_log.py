"""The trainer driver's own log records, one JSON object a line, in the attempt's logs
directory (`trainer.jsonl`), rotated like the containers' logs.

    with trainer_log(os.environ, limits):   # no-op outside a cluster job's pods
        ...train...

Records of the `rlhf_trainer` loggers (INFO and above) and every library's warnings: time,
level, logger, message and, for a failure, the traceback. The same warnings still reach
stderr, which the submitter's log keeps too.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from logging.handlers import RotatingFileHandler
from pathlib import Path

from rlhf_trainer.config.podlogs import LOGS_DIR_ENV, TRAINER_LOG, ContainerLogsConfig


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, ensure_ascii=False)


@contextmanager
def trainer_log(env: Mapping[str, str], limits: ContainerLogsConfig) -> Iterator[Path | None]:
    """Keep the driver's records in `$RLHF_LOGS_DIR/trainer.jsonl` while the block runs; the
    file's path, or None (not in a cluster job's pod, or the volume cannot be written)."""
    logs_dir = env.get(LOGS_DIR_ENV)
    if not logs_dir:
        yield None
        return
    path = Path(logs_dir) / TRAINER_LOG
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = RotatingFileHandler(
            path, maxBytes=limits.max_bytes, backupCount=limits.backups, encoding="utf-8"
        )
    except OSError as err:
        print(f"cannot keep the trainer's log in {path}: {err}", file=sys.stderr)
        yield None
        return
    handler.setFormatter(JsonFormatter())
    handler.setLevel(logging.INFO)
    # Warnings keep reaching stderr as before (logging's last resort did that with no handler).
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(logging.WARNING)
    root, ours = logging.getLogger(), logging.getLogger("rlhf_trainer")
    added = [h for h in (handler, stderr) if not (h is stderr and root.handlers)]
    levels = (root.level, ours.level)
    root.setLevel(min(root.level, logging.WARNING))
    if ours.level == logging.NOTSET or ours.level > logging.INFO:
        ours.setLevel(logging.INFO)
    for h in added:
        root.addHandler(h)
    try:
        yield path
    finally:
        for h in added:
            root.removeHandler(h)
        handler.close()
        root.setLevel(levels[0])
        ours.setLevel(levels[1])
