"""A user's reward function in its own process: results, errors, time limits, crashes."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
import torch

from rlhf_trainer.config import RewardFunctionLimits
from rlhf_trainer.rewards.function_runner import (
    RewardFunctionCodeError,
    RewardFunctionError,
    RewardFunctionLoadError,
    RewardFunctionRunner,
    RewardFunctionTimeout,
)
from rlhf_trainer.sandbox import process
from rlhf_trainer.sandbox.process import WorkerProcess

# Whose fault: the file and the code are the job's (no retry), a dead process may not be.
CODE, LOAD = RewardFunctionCodeError, RewardFunctionLoadError

LIMITS = RewardFunctionLimits()
Q, P, L = ["p1 yes", "p2 no"], ["p1", "p2"], ["yes", None]


def reward_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "reward_func.py"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.parametrize(
    ("body", "rewards", "scores", "extra"),
    [
        (
            """
            def reward_func(queries, prompts, labels):
                return [float(q.endswith(str(l))) for q, l in zip(queries, labels)]
            """,
            [1.0, 0.0],
            [1.0, 0.0],
            {},
        ),
        (
            """
            def reward_func(queries, prompts, labels):
                print("chatty user code writes to stdout")  # must not break the protocol
                return {"rewards": [0.5, -1], "scores": [1, 0],
                        "extra_logs": {"length": [4, 6], "calls": 1}}
            """,
            [0.5, -1.0],
            [1.0, 0.0],
            {"length": 5.0, "calls": 1.0},
        ),
        (
            """
            import torch
            def reward_func(queries, prompts, labels):
                return torch.tensor([[2.0], [3.0]])
            """,
            [2.0, 3.0],
            [2.0, 3.0],
            {},
        ),
    ],
    ids=["list", "dict-with-scores-and-logs", "torch-tensor"],
)
def test_results(
    tmp_path: Path, body: str, rewards: list[float], scores: list[float], extra: dict[str, float]
) -> None:
    with RewardFunctionRunner(reward_file(tmp_path, body), timeout_seconds=30) as runner:
        result = runner(Q, P, L)
    assert result.rewards.tolist() == rewards and result.rewards.dtype == torch.float32
    assert result.scores.tolist() == scores
    assert result.extra_logs == extra


@pytest.mark.parametrize(
    ("body", "message", "error"),
    [
        (
            """
            def reward_func(queries, prompts, labels):
                return [1 / 0 for _ in queries]
            """,
            r"raised an exception:\n(.|\n)*reward_func\.py\", line 3(.|\n)*ZeroDivisionError",
            CODE,
        ),
        (
            """
            def reward_func(queries, prompts, labels):
                return [1.0]
            """,
            "has 1 values for 2 queries",
            CODE,
        ),
        (
            """
            def reward_func(queries, prompts, labels):
                return [1.0, float("nan")]
            """,
            r"rewards\[1\] is nan",
            CODE,
        ),
        (
            """
            def reward_func(queries, prompts, labels):
                return {"score": [1, 2]}
            """,
            "needs a 'rewards' entry",
            CODE,
        ),
        ("def reward_func(:\n", r"cannot load(.|\n)*SyntaxError", LOAD),
        ("x = 1\n", "defines no function reward_func", LOAD),
    ],
    ids=["raises", "wrong-length", "nan", "dict-without-rewards", "syntax-error", "no-function"],
)
def test_errors_carry_the_cause(
    tmp_path: Path, body: str, message: str, error: type[RewardFunctionError]
) -> None:
    with (
        RewardFunctionRunner(reward_file(tmp_path, body), timeout_seconds=30) as runner,
        pytest.raises(error, match=message),
    ):
        runner(Q, P, L)


def test_timeout_kills_the_worker_and_the_next_call_gets_a_fresh_one(tmp_path: Path) -> None:
    path = reward_file(
        tmp_path,
        """
        import time
        def reward_func(queries, prompts, labels):
            if queries[0] == "hang":
                time.sleep(60)
            return [1.0 for _ in queries]
        """,
    )
    with RewardFunctionRunner(path, timeout_seconds=1.0) as runner:
        runner.start()
        first = runner._worker
        assert first is not None
        with pytest.raises(RewardFunctionTimeout, match=r"timeoutSeconds \(1 s\)"):
            runner(["hang"], ["p"], [None])
        assert first.proc.poll() is not None  # killed, not left running
        assert runner(["fine"], ["p"], [None]).rewards.tolist() == [1.0]
        assert runner.restarts == 1


@pytest.mark.parametrize(
    ("crash", "status"),
    [("os._exit(3)", "exit code 3"), ("os.kill(os.getpid(), signal.SIGKILL)", "signal 9")],
    ids=["exit", "sigkill"],
)
def test_a_crashing_worker_is_reported_and_replaced(
    tmp_path: Path, crash: str, status: str
) -> None:
    path = reward_file(
        tmp_path,
        f"""
        import os, signal, sys
        def reward_func(queries, prompts, labels):
            if queries[0] == "crash":
                print("about to die", file=sys.stderr, flush=True)
                {crash}
            return [0.0 for _ in queries]
        """,
    )
    with RewardFunctionRunner(path, timeout_seconds=30) as runner:
        pattern = f"worker process died: .*{status}.*; its last output:\\nabout to die"
        with pytest.raises(RewardFunctionError, match=pattern) as died:
            runner(["crash"], ["p"], [None])
        assert died.type is RewardFunctionError  # neither the file's nor the code's fault
        assert runner(["ok"], ["p"], [None]).rewards.tolist() == [0.0]


def test_a_killed_workers_reader_never_reads_the_next_workers_pipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kill` closed the pipes under readers still between two reads; the next worker's
    pipes took the same numbers and its `ready` went to the dead worker's reader (the next
    worker then looked silent, or dead while loading). Each reader now closes its own."""
    read = process._read

    def slow_read(fd: int) -> bytes:  # every reader lingers between two reads
        time.sleep(0.3)
        return read(fd)

    monkeypatch.setattr(process, "_read", slow_read)
    path = reward_file(tmp_path, "def reward_func(q, p, l):\n    return [0.0] * len(q)\n")
    first = WorkerProcess(path, LIMITS)
    assert first.receive(timeout=30) == {"ready": True, "cpu": pytest.approx(0, abs=5)}
    first.kill()
    second = WorkerProcess(path, LIMITS)
    try:
        assert second.receive(timeout=30) == {"ready": True, "cpu": pytest.approx(0, abs=5)}
    finally:
        second.kill()
    for worker in (first, second):
        for reader in worker._readers:
            reader.join(timeout=10)
        assert worker.proc.stdout is not None and worker.proc.stdout.closed


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RewardFunctionLoadError, match="does not exist"):
        RewardFunctionRunner(tmp_path / "nope.py")


def test_close_stops_the_worker(tmp_path: Path) -> None:
    path = reward_file(tmp_path, "def reward_func(q, p, l):\n    return [0.0] * len(q)\n")
    runner = RewardFunctionRunner(path)
    runner.start()
    worker = runner._worker
    assert worker is not None and worker.proc.poll() is None
    runner.close()
    assert worker.proc.poll() is not None
    assert os.path.exists(path)
