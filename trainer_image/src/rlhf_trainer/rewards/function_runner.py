"""Run a user's `reward_func(queries, prompts, labels)` file in its own, confined process.

A separate process (a plain subprocess, so it works the same from a script, a test or a Ray
actor) means a reward function cannot hang or crash the driver, and can be held to limits:
each call has a time limit, after which the worker's whole process group is killed and a fresh
worker starts on the next call; the process runs under `models.rewardFunction.limits` (memory,
CPU, open files, processes, file size: `_confine` and `sandbox`), without the job's secrets in
its environment, and what it prints and returns is capped (`outputBytes`). An exception comes
back as `RewardFunctionCodeError` carrying the user's traceback; a broken limit as
`RewardFunctionLimitError` naming the limit, its value and the field to change; a worker that
dies otherwise (segfault, `os._exit`, the pod's OOM killer) is reported with its exit status and
replaced on the next call.

The error types say whose fault a failure is (the runner retries a job or not by them): the
file (`RewardFunctionLoadError`) and the code (`RewardFunctionCodeError`, limits included: a
function that needs more than its job allows is a bug in the job) are the job's; a timeout or a
dead process (`RewardFunctionTimeout`, `RewardFunctionError`) may be the machine's.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import signal
from collections.abc import Sequence
from pathlib import Path

from rlhf_trainer.config import RewardFunctionLimits
from rlhf_trainer.config.outcome import InvalidSpecError

from ._confine import cpu_hard_limit
from .output import RewardOutputError, RewardResult, parse_reward_output
from .worker_process import WorkerProcess

log = logging.getLogger(__name__)

# Importing the user's file may import torch or other heavy packages: give it time.
DEFAULT_START_TIMEOUT = 120.0
FIELD = "models.rewardFunction.limits"
# What each limit counts, for the messages.
_UNITS = {
    "memoryMiB": "MiB of address space per process",
    "cpuSeconds": "CPU seconds per call",
    "openFiles": "open files per process",
    "processes": "processes at once",
    "fileSizeMiB": "MiB per file written",
    "outputBytes": "bytes printed or returned per call",
}
_WHAT = {
    "memoryMiB": "an allocation failed (MemoryError)",
    "openFiles": "opening one more file failed (EMFILE)",
    "fileSizeMiB": "a write past the limit failed (EFBIG)",
}


class RewardFunctionError(RuntimeError):
    """The reward function failed: it raised, returned bad values, timed out or crashed."""


class RewardFunctionLoadError(InvalidSpecError, RewardFunctionError):
    """The file does not exist, does not import, or defines no `reward_func`."""


class RewardFunctionCodeError(InvalidSpecError, RewardFunctionError):
    """The user's `reward_func` raised, or returned something that is not rewards."""


class RewardFunctionLimitError(RewardFunctionCodeError):
    """The function reached one of `models.rewardFunction.limits` (`limit`: its camelCase
    name)."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class RewardFunctionTimeout(RewardFunctionError):
    pass


class RewardFunctionRunner:
    """Calls `reward_func` from `path` in a worker process; `close()` (or `with`) stops it."""

    def __init__(
        self,
        path: str | Path,
        timeout_seconds: float = 60.0,
        *,
        limits: RewardFunctionLimits | None = None,
        start_timeout_seconds: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise RewardFunctionLoadError(f"reward function file {self.path} does not exist")
        self.timeout = timeout_seconds
        self.limits = limits if limits is not None else RewardFunctionLimits()
        self.start_timeout = start_timeout_seconds
        self._worker: WorkerProcess | None = None
        self.restarts = 0

    @property
    def name(self) -> str:
        return f"reward function {self.path.name}"

    def start(self) -> None:
        """Start the worker now (else the first call does); raises if the file cannot load."""
        if self._worker is not None and self._worker.alive():
            return
        if self._worker is not None:
            self._discard()
        worker = WorkerProcess(self.path, self.limits)
        self._worker = worker
        try:
            reply = worker.receive(self.start_timeout)
        except queue.Empty:
            self._discard()
            raise RewardFunctionTimeout(
                f"{self.name}: loading {self.path} took longer than "
                f"{self.start_timeout:g} s; the worker was killed"
            ) from None
        if reply is None:  # died while importing: a limit, or killed (not the file's fault)
            raise self._died(worker, f"cannot load {self.path}")
        if reply.get("ready"):
            return
        self._discard()
        detail = str(reply.get("error", "")).rstrip()
        if reply.get("limit"):
            raise self._limit_error(str(reply["limit"]), detail)
        if reply.get("phase") == "confine":  # the machine's: this process cannot be confined
            raise RewardFunctionError(f"{self.name}: cannot confine its process:\n{detail}")
        raise RewardFunctionLoadError(f"{self.name}: cannot load {self.path}:\n{detail}")

    def __call__(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str | None]
    ) -> RewardResult:
        if not (len(queries) == len(prompts) == len(labels)):
            raise ValueError("queries, prompts and labels must have the same length")
        worker = self._ready_worker()
        try:
            worker.send(
                {"queries": list(queries), "prompts": list(prompts), "labels": list(labels)}
            )
            reply = worker.receive(self.timeout)
        except queue.Empty:
            self._discard()
            raise RewardFunctionTimeout(
                f"{self.name}: no result within rewardFunction.timeoutSeconds "
                f"({self.timeout:g} s) for {len(queries)} queries; its processes were killed "
                "and a fresh worker starts on the next call"
            ) from None
        except OSError:  # BrokenPipeError: it died before reading the request
            reply = None
        if reply is None:
            raise self._died(worker, "the worker process died")
        if not reply.get("ok"):
            detail = str(reply.get("error", "")).rstrip()
            if reply.get("limit"):
                # A fresh worker for the next call: this one may hold what it piled up, or
                # processes it started.
                self._discard()
                raise self._limit_error(str(reply["limit"]), detail)
            raise RewardFunctionCodeError(f"{self.name} raised an exception:\n{detail}")
        try:
            return parse_reward_output(reply["result"], len(queries), self.name)
        except RewardOutputError as err:
            raise RewardFunctionCodeError(str(err)) from err

    def _ready_worker(self) -> WorkerProcess:
        """The running worker, replaced first when it has less CPU left than one call may use
        (its hard CPU limit is for its whole life: see `_confine`)."""
        worker = self._worker
        if worker is not None and worker.alive() and worker.cpu_used > self.limits.cpu_seconds:
            log.info(
                "%s: replacing its worker after %.0f CPU seconds, so that the next call has "
                "its whole %s.cpuSeconds",
                self.name,
                worker.cpu_used,
                FIELD,
            )
            self._discard()
        self.start()
        assert self._worker is not None
        return self._worker

    def _limit_error(self, limit: str, detail: str, what: str = "") -> RewardFunctionLimitError:
        value = self.limits.model_dump(by_alias=True).get(limit)
        what = what or _WHAT.get(limit, "")
        text = (
            f"{self.name} reached its limit {FIELD}.{limit} ({value} {_UNITS.get(limit, '')})"
            f"{': ' + what if what else ''}; raise {FIELD}.{limit} if the function needs "
            "more, or make it use less"
        )
        return RewardFunctionLimitError(text + (f":\n{detail}" if detail else ""), limit)

    def _died(self, worker: WorkerProcess, doing: str) -> RewardFunctionError:
        """The error for a worker that is gone: a limit the driver or the kernel enforced,
        else its exit status; the worker and whatever it left running are discarded."""
        code = worker.exit_code(timeout=5)
        tail = worker.output_tail().rstrip()
        broken, cpu = worker.broken, worker.cpu_used
        self._discard()
        if broken is not None:
            return self._limit_error(broken[0], tail, broken[1])
        if code == -signal.SIGXCPU:
            return self._limit_error("cpuSeconds", tail, "the kernel stopped it (SIGXCPU)")
        if code == -signal.SIGKILL and cpu >= cpu_hard_limit(self.limits.cpu_seconds) - 1:
            what = f"it used {cpu:.0f} s of CPU and the kernel killed it at the hard limit"
            return self._limit_error("cpuSeconds", tail, what)
        status = (
            "still running"
            if code is None
            else (f"killed by signal {-code}" if code < 0 else f"exit code {code}")
        )
        if code == -signal.SIGKILL:  # not the trainer's doing: it kills only what it reports
            status += " (SIGKILL: the OOM killer at the pod's memory limit, or the function)"
        return RewardFunctionError(
            f"{self.name}: {doing}: {status}" + (f"; its last output:\n{tail}" if tail else "")
        )

    def _discard(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None
            self.restarts += 1

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def __enter__(self) -> RewardFunctionRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
