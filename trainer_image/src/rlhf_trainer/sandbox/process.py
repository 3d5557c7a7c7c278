"""One confined worker process (a reward function's or an agent's), as the driver holds it:
started in its own session with the allowlisted environment, its two output streams read in
bounded chunks, its processes counted, and killed whole.

Both streams are read with `os.read` in chunks, never by line: a function that prints a
gigabyte without a newline must not make the driver buffer a gigabyte. What it prints is
counted from each request on, and past `outputBytes` the worker is killed (it is then blocked
on a full pipe, so it never writes much more than the cap); only a tail is kept, for error
messages. A reply line longer than the cap is cut off the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlhf_trainer.config import RewardFunctionLimits

from .session import ProcessWatch, kill_session, worker_env

WORKER_MODULE = "rlhf_trainer.sandbox._worker"
# The worker imports this package: the directory that holds `rlhf_trainer`.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
_CHUNK = 65536
_TAIL = 4000
_EXIT_GRACE = 0.5  # seconds a worker whose output ended has to be gone by itself
_ENVELOPE = 4096  # a reply's JSON around its result


class WorkerProcess:
    """`module` is the worker's entry point: `_worker` (a reward function; with `mode`
    "grade", an OpenAI python grader) or `_agent_worker` (a multi-turn agent); all confine
    themselves the same way (`_confine`)."""

    def __init__(
        self,
        path: Path,
        limits: RewardFunctionLimits,
        module: str = WORKER_MODULE,
        mode: str = "",
    ) -> None:
        self.limits = limits
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                module,
                str(path),
                json.dumps(limits.model_dump(by_alias=False)),
                *([mode] if mode else []),
            ],
            env=worker_env(PACKAGE_ROOT),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own session and process group: killed as a whole
        )
        self.pid = self.proc.pid
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        # (limit, what happened) once the driver killed it for a limit; read after its death.
        self.broken: tuple[str, str] | None = None
        self._reported_cpu = 0.0
        self._lock = threading.Lock()
        self._printed = 0
        self._tail = bytearray()
        self._readers = [
            threading.Thread(target=self._read_replies, daemon=True),
            threading.Thread(target=self._read_output, daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        self.watch = ProcessWatch(self.pid, limits.processes, self.alive, self._too_many)

    # --- state, without reaping the process (its pid names the session until it is reaped) -
    def alive(self) -> bool:
        return self._peek() is None

    def _peek(self) -> int | None:
        """The exit status as Popen.returncode has it, or None while it runs; the process is
        left unreaped, so its session id cannot be reused before `kill` has used it."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.proc.poll()
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def exit_code(self, timeout: float) -> int | None:
        """Its exit status, once it is gone: what it left running is killed first (those
        processes hold its pipes open), then both readers drain to the end. Asked when its
        output ended, which a worker's exit does a moment before the worker can be waited for
        (its interpreter closes its files first): it gets that moment, so that the status is
        how it ended, not the driver's own SIGKILL."""
        self.watch.stop()
        deadline = time.monotonic() + timeout
        grace = time.monotonic() + min(timeout, _EXIT_GRACE)
        while self.alive() and time.monotonic() < grace:
            time.sleep(0.002)
        self._kill_session()
        for reader in self._readers:
            reader.join(timeout=max(0.0, deadline - time.monotonic()))
        while (code := self._peek()) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return code

    def _kill_session(self) -> None:
        if self.proc.returncode is not None:
            return  # reaped: its pid, and so its session id, may be someone else's by now
        kill_session(self.pid)

    @property
    def cpu_used(self) -> float:
        """CPU seconds the worker has used: its last reply's account, or the watch's."""
        return max(self._reported_cpu, self.watch.cpu_seconds)

    # --- requests and replies ---------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._printed = 0  # the output budget is per call
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next reply; None when the process died; raises queue.Empty on timeout."""
        reply = self.replies.get(timeout=timeout)
        if reply is not None and isinstance(reply.get("cpu"), int | float):
            self._reported_cpu = float(reply["cpu"])
        return reply

    def output_tail(self) -> str:
        with self._lock:
            return self._tail.decode("utf-8", errors="replace")

    # Each reader closes its own pipe when it is done, and nothing else closes it: a reader
    # still running when another thread closed its descriptor read whatever the number meant
    # next, in `make test` the next worker's pipe, whose replies it took (that worker then
    # looked silent, or dead at its load).
    def _read_replies(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        fd, pending = stream.fileno(), bytearray()
        cap = self.limits.output_bytes + _ENVELOPE
        try:
            while chunk := _read(fd):
                pending += chunk
                while (end := pending.find(b"\n")) >= 0:
                    line = bytes(pending[:end])
                    del pending[: end + 1]
                    with contextlib.suppress(ValueError):
                        reply = json.loads(line)
                        if isinstance(reply, dict):
                            self.replies.put(reply)
                if len(pending) > cap:
                    self._break("outputBytes", f"it sent a reply of more than {cap} bytes")
                    break
        finally:
            self.replies.put(None)  # EOF: the process is gone
            stream.close()

    def _read_output(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        fd, cap = stream.fileno(), self.limits.output_bytes
        try:
            while chunk := _read(fd):
                with self._lock:
                    self._printed += len(chunk)
                    self._tail += chunk
                    del self._tail[:-_TAIL]
                    over = self._printed > cap
                if over:
                    self._break("outputBytes", f"it printed more than {cap} bytes in one call")
        finally:
            stream.close()

    def _too_many(self, count: int) -> None:
        self._break("processes", f"it ran {count} processes at once")

    def _break(self, limit: str, what: str) -> None:
        with self._lock:
            if self.broken is None:
                self.broken = (limit, what)
        self._kill_session()

    # --- the end ----------------------------------------------------------------------------
    def kill(self) -> None:
        """Kill every process of its session, then reap it and close its input (its output
        pipes are the readers' to close, at their end)."""
        self.watch.stop()
        self._kill_session()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()

    def close(self) -> None:
        """Let it end by itself (end of input), then kill whatever it left running."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        deadline = time.monotonic() + 1.0
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.kill()


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, _CHUNK)
    except OSError:
        return b""
