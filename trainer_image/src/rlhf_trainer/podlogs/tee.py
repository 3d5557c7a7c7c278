"""Run a container's command with its output copied, as it comes, into a rotated file.

    code = run_teed(["ray", "start", "--block", ...], Path(".../ray-head.log"), max_bytes, 4)

The command's stdout and stderr (merged, in the order written: what `kubectl logs` shows) go
on to this process's stdout unchanged, so `kubectl logs` keeps working, and line by line into
`log_path`, each line prefixed with its UTC time. The file is a
`logging.handlers.RotatingFileHandler`'s: at `max_bytes` it becomes `.log.1` (the older ones
move up, the oldest beyond `backups` is dropped), and every line is flushed as written, so a
pod killed mid-run keeps everything up to its last line.

This process is the container's main process: the signals a container gets (SIGTERM at a
drain or deletion, SIGINT, SIGHUP...) are passed on to the command, whose exit status becomes
this process's (128 + N after signal N, as a shell reports it). A volume that cannot be
written never stops the command: the output still reaches stdout, and the first error is said
there once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import BinaryIO

# A line longer than this is written in pieces (a progress bar redrawn with \r has no \n).
CHUNK = 64 * 1024
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


def timestamp(now: datetime | None = None) -> str:
    """RFC 3339 in UTC with milliseconds, as `kubectl logs --timestamps` (pure)."""
    now = now or datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


class LogFile(RotatingFileHandler):
    """The rotated file of one container's lines: bare lines (each keeps its own newline);
    a write error is kept in `error` (logging would print a traceback per line)."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self.setFormatter(logging.Formatter("%(message)s"))
        self.terminator = ""
        self.error: BaseException | None = None

    def handleError(self, record: logging.LogRecord) -> None:
        self.error = sys.exc_info()[1]

    def line(self, text: str) -> None:
        self.emit(logging.LogRecord("podlogs", logging.INFO, "", 0, text, None, None))


class LineWriter:
    """Writes each chunk of output to `out` and, time-stamped, to the rotated file."""

    def __init__(self, file: LogFile | None, out: BinaryIO, clock: Callable[[], str]):
        self.file, self.out, self.clock = file, out, clock

    def write(self, chunk: bytes) -> None:
        self.out.write(chunk)
        self.out.flush()
        if self.file is None:
            return
        self.file.line(f"{self.clock()} {chunk.decode('utf-8', errors='replace')}")
        if self.file.error is not None:
            say(f"cannot write the log file any more ({self.file.error}); stdout only from now")
            self.close()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def say(message: str) -> None:
    print(f"[rlhf-podlogs] {message}", file=sys.stderr, flush=True)


def _pump(pipe: BinaryIO, writer: LineWriter) -> None:
    for chunk in iter(lambda: pipe.readline(CHUNK), b""):
        writer.write(chunk)


def exit_status(returncode: int) -> int:
    """A child's returncode as a shell's exit status: 128 + N after signal N (pure)."""
    return 128 - returncode if returncode < 0 else returncode


def run_teed(
    command: Sequence[str],
    log_path: Path | None,
    max_bytes: int,
    backups: int,
    *,
    out: BinaryIO | None = None,
    clock: Callable[[], str] = timestamp,
) -> int:
    """Run `command` to its end with its output teed (see the module); its exit status.
    `log_path` None: no file (the volume is missing), the output still passes through."""
    file: LogFile | None = None
    if log_path is not None:
        try:
            file = LogFile(log_path, max_bytes, backups)
        except OSError as err:
            say(f"cannot open {log_path} ({err}): this container's log is not kept")
    writer = LineWriter(file, out or sys.stdout.buffer, clock)
    process = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    pipe = process.stdout
    if pipe is None:  # Popen with stdout=PIPE always has one
        raise RuntimeError("no pipe from the command")
    pump = threading.Thread(target=_pump, args=(pipe, writer), daemon=True)
    pump.start()
    try:
        returncode = process.wait()
        # What the command left in the pipe; a daemon it started may keep the pipe open.
        pump.join(timeout=5.0)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        writer.close()
    return exit_status(returncode)


def pod_name() -> str:
    from rlhf_trainer.config.podlogs import POD_NAME_ENV

    return os.environ.get(POD_NAME_ENV) or os.uname().nodename
