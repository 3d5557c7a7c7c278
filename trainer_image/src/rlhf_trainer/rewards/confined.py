"""User code in its own confined worker process: the driver's half, shared by reward functions
(`function_runner`) and multi-turn agents (`agent_runner`).

Each request has a time limit, after which the worker's whole process group is killed and a
fresh worker starts on the next request; the process runs under the job's limits (memory,
CPU, open files, processes, file size: `rlhf_trainer.sandbox`), without the job's secrets in
its environment, and what it prints and returns is capped (`outputBytes`). An exception comes
back as the kind's code error carrying the user's traceback; a broken limit as its limit error
naming the limit, its value and the field to change; a worker that dies otherwise (segfault,
`os._exit`, the pod's OOM killer) is reported with its exit status and replaced on the next
request.

The error types say whose fault a failure is (the runner retries a job or not by them): the
file (`load`) and the code (`code`, limits included: code that needs more than its job allows
is a bug in the job) are the job's; a timeout or a dead process (`timeout`, `failed`) may be
the machine's.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rlhf_trainer.config import RewardFunctionLimits
from rlhf_trainer.sandbox._confine import cpu_hard_limit
from rlhf_trainer.sandbox.process import WorkerProcess

log = logging.getLogger(__name__)

# Importing the user's file may import torch or other heavy packages: give it time.
DEFAULT_START_TIMEOUT = 120.0
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


class LimitErrorType(Protocol):
    def __call__(self, message: str, limit: str) -> Exception: ...


@dataclass(frozen=True)
class ErrorKinds:
    """The exceptions one kind of user code raises, by whose fault a failure is."""

    failed: type[Exception]  # the process died, or cannot be confined: maybe the machine's
    load: type[Exception]  # the file is missing, does not import, lacks its entry point
    code: type[Exception]  # the user's code raised or returned something unusable
    limit: LimitErrorType  # the code reached one of its limits (a code error)
    timeout: type[Exception]


class ConfinedRunner:
    """A worker process running `module` on the user's file at `path`; `close()` (or `with`)
    stops it. Subclasses name the kind: `label` ("reward function"), `field` (the config's
    path, for the messages), `timeout_field`, `module` and `errors`."""

    label: ClassVar[str]
    field: ClassVar[str]
    timeout_field: ClassVar[str]
    module: ClassVar[str]
    errors: ClassVar[ErrorKinds]

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
            raise self.errors.load(f"{self.label} file {self.path} does not exist")
        self.timeout = timeout_seconds
        self.limits = limits if limits is not None else RewardFunctionLimits()
        self.start_timeout = start_timeout_seconds
        self._worker: WorkerProcess | None = None
        self._lock = threading.RLock()  # one request at a time (async rollout, evaluation)
        self.restarts = 0

    @property
    def name(self) -> str:
        return f"{self.label} {self.path.name}"

    def start(self) -> None:
        """Start the worker now (else the first request does); raises if the file cannot
        load."""
        with self._lock:
            if self._worker is not None and self._worker.alive():
                return
            if self._worker is not None:
                self._discard()
            worker = WorkerProcess(self.path, self.limits, self.module)
            self._worker = worker
            try:
                reply = worker.receive(self.start_timeout)
            except queue.Empty:
                self._discard()
                raise self.errors.timeout(
                    f"{self.name}: loading {self.path} took longer than "
                    f"{self.start_timeout:g} s; the worker was killed"
                ) from None
            if reply is None:  # died while importing: a limit, or killed (not the file's)
                raise self._died(worker, f"cannot load {self.path}")
            if reply.get("ready"):
                return
            self._discard()
            detail = str(reply.get("error", "")).rstrip()
            if reply.get("limit"):
                raise self._limit_error(str(reply["limit"]), detail)
            if reply.get("phase") == "confine":  # the machine's: it cannot be confined
                raise self.errors.failed(f"{self.name}: cannot confine its process:\n{detail}")
            raise self.errors.load(f"{self.name}: cannot load {self.path}:\n{detail}")

    def request(self, message: dict[str, Any], doing: str) -> dict[str, Any]:
        """Send `message`, return the worker's successful reply; `doing` says what the request
        was, for the timeout's message. A raised exception comes back as `errors.code`."""
        with self._lock:
            worker = self._ready_worker()
            try:
                worker.send(message)
                reply = worker.receive(self.timeout)
            except queue.Empty:
                self._discard()
                raise self.errors.timeout(
                    f"{self.name}: no result within {self.timeout_field} ({self.timeout:g} s) "
                    f"{doing}; its processes were killed and a fresh worker starts on the next "
                    "call"
                ) from None
            except OSError:  # BrokenPipeError: it died before reading the request
                reply = None
            if reply is None:
                raise self._died(worker, "the worker process died")
            if reply.get("ok"):
                return reply
            detail = str(reply.get("error", "")).rstrip()
            if reply.get("limit"):
                # A fresh worker for the next call: this one may hold what it piled up, or
                # processes it started.
                self._discard()
                raise self._limit_error(str(reply["limit"]), detail)
            raise self.errors.code(f"{self.name} raised an exception:\n{detail}")

    def _ready_worker(self) -> WorkerProcess:
        """The running worker, replaced first when it has less CPU left than one call may use
        (its hard CPU limit is for its whole life: see `_confine`)."""
        worker = self._worker
        if worker is not None and worker.alive() and worker.cpu_used > self.limits.cpu_seconds:
            log.info(
                "%s: replacing its worker after %.0f CPU seconds, so that the next call has "
                "its whole %s.limits.cpuSeconds",
                self.name,
                worker.cpu_used,
                self.field,
            )
            self._discard()
        self.start()
        assert self._worker is not None
        return self._worker

    def _limit_error(self, limit: str, detail: str, what: str = "") -> Exception:
        value = self.limits.model_dump(by_alias=True).get(limit)
        what = what or _WHAT.get(limit, "")
        field = f"{self.field}.limits.{limit}"
        text = (
            f"{self.name} reached its limit {field} ({value} {_UNITS.get(limit, '')})"
            f"{': ' + what if what else ''}; raise {field} if the code needs more, or make "
            "it use less"
        )
        return self.errors.limit(text + (f":\n{detail}" if detail else ""), limit)

    def _died(self, worker: WorkerProcess, doing: str) -> Exception:
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
            status += " (SIGKILL: the OOM killer at the pod's memory limit, or the code)"
        return self.errors.failed(
            f"{self.name}: {doing}: {status}" + (f"; its last output:\n{tail}" if tail else "")
        )

    def _discard(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None
            self.restarts += 1

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None

    def __enter__(self) -> ConfinedRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
