"""A python grader's `grade(sample, item) -> float`, run in the reward-function sandbox.

The source is written to a private directory and loaded by the same worker process as a
`models.rewardFunction` file (`rlhf_trainer.sandbox._worker` in its `grade` mode): its own
session, the limits of `limits` (memory, CPU, files, processes, output), an environment
without the job's secrets, every process killed at the end or on a timeout. A sample whose
`grade` raises is that sample's error; a timeout, a broken limit or a dead worker fails the
whole call (`GraderServerError`) and the next call starts a fresh worker.
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlhf_trainer.config import RewardFunctionLimits
from rlhf_trainer.sandbox.process import WorkerProcess

GRADE_MODE = "grade"
START_TIMEOUT = 60.0


class GraderServerError(RuntimeError):
    """The grader's process failed as a whole; `kind`: load, timeout, limit or crash."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class SampleResult:
    score: float | None
    error: str | None = None


class PythonGraderRunner:
    """`grade(samples, items)` calls the grader's `grade` once per pair in its worker."""

    def __init__(
        self,
        name: str,
        source: str,
        *,
        limits: RewardFunctionLimits | None = None,
        timeout_seconds: float = 120.0,
        field: str = "limits",
    ) -> None:
        self.name = name
        self.limits = limits if limits is not None else RewardFunctionLimits()
        self.timeout = timeout_seconds
        self.field = field
        self._dir = Path(tempfile.mkdtemp(prefix="rlhf-grader-"))
        self.path = self._dir / "grader.py"
        self.path.write_text(source, encoding="utf-8")
        self._worker: WorkerProcess | None = None

    def start(self) -> None:
        if self._worker is not None and self._worker.alive():
            return
        self._discard()
        worker = WorkerProcess(self.path, self.limits, mode=GRADE_MODE)
        self._worker = worker
        reply = self._receive(worker, START_TIMEOUT, "loading its source")
        if reply.get("ready"):
            return
        self._discard()
        detail = str(reply.get("error", "")).rstrip()
        kind = "limit" if reply.get("limit") else "load"
        raise GraderServerError(f"python grader {self.name!r} cannot load:\n{detail}", kind)

    def grade(
        self, samples: Sequence[Mapping[str, Any]], items: Sequence[Mapping[str, Any]]
    ) -> list[SampleResult]:
        if len(samples) != len(items):
            raise ValueError("samples and items must have the same length")
        if not samples:
            return []
        self.start()
        worker = self._worker
        assert worker is not None
        # One that died before reading: the reply below says so.
        with contextlib.suppress(OSError):
            worker.send({"samples": list(samples), "items": list(items)})
        reply = self._receive(worker, self.timeout, f"grading {len(samples)} samples")
        if not reply.get("ok"):
            self._discard()
            detail = str(reply.get("error", "")).rstrip()
            limit = reply.get("limit")
            if limit:
                raise GraderServerError(self._limit_text(str(limit), detail), "limit")
            raise GraderServerError(f"python grader {self.name!r} failed:\n{detail}", "crash")
        results = reply.get("result")
        if not isinstance(results, list) or len(results) != len(samples):
            raise GraderServerError(f"python grader {self.name!r}: a malformed reply", "crash")
        return [
            SampleResult(None, str(r.get("error")))
            if "error" in r
            else SampleResult(float(r["score"]))
            for r in results
        ]

    def _receive(self, worker: WorkerProcess, timeout: float, doing: str) -> dict[str, Any]:
        try:
            reply = worker.receive(timeout)
        except queue.Empty:
            self._discard()
            raise GraderServerError(
                f"python grader {self.name!r}: no answer within {timeout:g} s while {doing} "
                "(timeoutSeconds); its processes were killed",
                "timeout",
            ) from None
        if reply is not None:
            return reply
        code = worker.exit_code(timeout=5)
        broken, tail = worker.broken, worker.output_tail().rstrip()
        self._discard()
        if broken is not None:
            raise GraderServerError(self._limit_text(broken[0], broken[1]), "limit")
        status = "still running" if code is None else f"exit status {code}"
        raise GraderServerError(
            f"python grader {self.name!r} died while {doing} ({status})"
            + (f"; its last output:\n{tail}" if tail else ""),
            "crash",
        )

    def _limit_text(self, limit: str, detail: str) -> str:
        value = self.limits.model_dump(by_alias=True).get(limit)
        return (
            f"python grader {self.name!r} reached its limit {self.field}.{limit} ({value}); "
            f"raise it or make the grader use less" + (f":\n{detail}" if detail else "")
        )

    def _discard(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> PythonGraderRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
