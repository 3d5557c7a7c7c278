"""Run a user's `reward_func(queries, prompts, labels)` file in its own process.

A separate process (a plain subprocess, so it works the same from a script, a test or a Ray
actor) means a reward function cannot hang or crash the driver: each call has a time limit,
after which the worker is killed and a fresh one starts on the next call; an exception comes
back as `RewardFunctionCodeError` carrying the user's traceback; a worker that dies (segfault,
`os._exit`, out of memory) is reported with its exit status and replaced on the next call.

The error types say whose fault a failure is (the runner retries a job or not by them): the
file (`RewardFunctionLoadError`) and the code (`RewardFunctionCodeError`) are the job's; a
timeout or a dead process (`RewardFunctionTimeout`, `RewardFunctionError`) may be the machine's.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .output import RewardOutputError, RewardResult, parse_reward_output

WORKER_MODULE = "rlhf_trainer.rewards._worker"
# Importing the user's file may import torch or other heavy packages: give it time.
DEFAULT_START_TIMEOUT = 120.0
_STDERR_TAIL = 4000


class RewardFunctionError(RuntimeError):
    """The reward function failed: it raised, returned bad values, timed out or crashed."""


class RewardFunctionLoadError(RewardFunctionError):
    """The file does not exist, does not import, or defines no `reward_func`."""


class RewardFunctionCodeError(RewardFunctionError):
    """The user's `reward_func` raised, or returned something that is not rewards."""


class RewardFunctionTimeout(RewardFunctionError):
    pass


def _worker_env() -> dict[str, str]:
    # The worker imports this package: make sure it finds the same copy as this process, even
    # when that copy is on sys.path only (a source checkout, a Ray runtime_env working_dir).
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    paths = [package_root, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


class _Worker:
    """One worker process with a reader thread that turns its stdout into a queue of replies."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE, str(path)],
            env=_worker_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_reader.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.replies.put(json.loads(line))
            except json.JSONDecodeError:
                continue
        self.replies.put(None)  # EOF: the process is gone

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            # Keep the tail only: a chatty reward function must not grow the driver's memory.
            if len(self.stderr) > 200:
                del self.stderr[:100]

    def stderr_tail(self) -> str:
        if self.proc.poll() is not None:
            self._stderr_reader.join(timeout=2)  # let it drain what a dead worker left
        return "".join(self.stderr)[-_STDERR_TAIL:]

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next reply; None when the process died; raises queue.Empty on timeout."""
        return self.replies.get(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class RewardFunctionRunner:
    """Calls `reward_func` from `path` in a worker process; `close()` (or `with`) stops it."""

    def __init__(
        self,
        path: str | Path,
        timeout_seconds: float = 60.0,
        *,
        start_timeout_seconds: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise RewardFunctionLoadError(f"reward function file {self.path} does not exist")
        self.timeout = timeout_seconds
        self.start_timeout = start_timeout_seconds
        self._worker: _Worker | None = None
        self.restarts = 0

    @property
    def name(self) -> str:
        return f"reward function {self.path.name}"

    def start(self) -> None:
        """Start the worker now (else the first call does); raises if the file cannot load."""
        if self._worker is not None and self._worker.proc.poll() is None:
            return
        if self._worker is not None:
            self._worker.kill()
            self.restarts += 1
        worker = _Worker(self.path)
        self._worker = worker
        try:
            reply = worker.receive(self.start_timeout)
        except queue.Empty:
            self._discard()
            raise RewardFunctionTimeout(
                f"{self.name}: loading {self.path} took longer than "
                f"{self.start_timeout:g} s; the worker was killed"
            ) from None
        if reply is None or not reply.get("ready"):
            detail = reply.get("error", "") if reply else self._death(worker)
            self._discard()
            if reply is None:  # died while importing (killed, out of memory): not the file's fault
                raise RewardFunctionError(f"{self.name}: cannot load {self.path}:\n{detail}")
            raise RewardFunctionLoadError(f"{self.name}: cannot load {self.path}:\n{detail}")

    def __call__(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str | None]
    ) -> RewardResult:
        if not (len(queries) == len(prompts) == len(labels)):
            raise ValueError("queries, prompts and labels must have the same length")
        self.start()
        worker = self._worker
        assert worker is not None
        try:
            worker.send(
                {"queries": list(queries), "prompts": list(prompts), "labels": list(labels)}
            )
            reply = worker.receive(self.timeout)
        except queue.Empty:
            self._discard()
            raise RewardFunctionTimeout(
                f"{self.name}: no result within rewardFunction.timeoutSeconds "
                f"({self.timeout:g} s) for {len(queries)} queries; the worker was killed and "
                "a fresh one starts on the next call"
            ) from None
        except (BrokenPipeError, OSError):
            reply = None
        if reply is None:
            detail = self._death(worker)
            self._discard()
            raise RewardFunctionError(f"{self.name}: the worker process died: {detail}")
        if not reply.get("ok"):
            raise RewardFunctionCodeError(
                f"{self.name} raised an exception:\n{reply.get('error', '').rstrip()}"
            )
        try:
            return parse_reward_output(reply["result"], len(queries), self.name)
        except RewardOutputError as err:
            raise RewardFunctionCodeError(str(err)) from err

    def _death(self, worker: _Worker) -> str:
        try:
            code = worker.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        status = (
            "still running"
            if code is None
            else (f"killed by signal {-code}" if code < 0 else f"exit code {code}")
        )
        tail = worker.stderr_tail().rstrip()
        return f"{status}" + (f"; its last output:\n{tail}" if tail else "")

    def _discard(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None
            self.restarts += 1

    def close(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def __enter__(self) -> RewardFunctionRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
