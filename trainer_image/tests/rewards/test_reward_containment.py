"""Hostile reward functions, each contained: the limits hold, the run gets a clear error naming
the limit, and nothing of the function is left running.

Every hostile body bounds itself too (a finite loop, a sleep that ends): if a limit did not
hold, the test fails, but the machine is not harmed. The limits are set by the worker before
it imports the file, so no line of these bodies runs unconfined.
"""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from rlhf_trainer.config import FailureClass, RewardFunctionLimits
from rlhf_trainer.rewards.function_runner import (
    RewardFunctionLimitError,
    RewardFunctionRunner,
    RewardFunctionTimeout,
)
from rlhf_trainer.runner.outcome import classify, explain
from rlhf_trainer.sandbox.session import session_members, worker_env

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024
Q, P, L = ["q"], ["p"], [None]


def runner(tmp_path: Path, body: str, timeout: float = 30, **limits: Any) -> RewardFunctionRunner:
    path = tmp_path / "reward_func.py"
    path.write_text(textwrap.dedent(body))
    return RewardFunctionRunner(path, timeout, limits=RewardFunctionLimits(**limits))


def broken_limit(fn: RewardFunctionRunner) -> RewardFunctionLimitError:
    """Call `fn`, which must break a limit; afterwards none of its processes may be left."""
    fn.start()
    assert fn._worker is not None
    session = fn._worker.pid
    with pytest.raises(RewardFunctionLimitError) as caught:
        fn(Q, P, L)
    assert [p.pid for p in session_members(session) if not p.zombie] == []
    return caught.value


def test_allocating_far_beyond_the_memory_limit(tmp_path: Path) -> None:
    fn = runner(
        tmp_path,
        """
        def reward_func(queries, prompts, labels):
            hoard = []
            for _ in range(128):  # 2 GiB at most, in 16 MiB pieces, if the limit did not hold
                hoard.append(b"x" * (16 << 20))
            return [0.0]
        """,
        memory_mib=256,
    )
    with fn:
        err = broken_limit(fn)
        assert err.limit == "memoryMiB"
        assert "models.rewardFunction.limits.memoryMiB (256 MiB" in str(err)
        assert "MemoryError" in str(err)
        assert classify(err) is FailureClass.INVALID_SPEC  # the job's bug: no retry
        assert explain(err).startswith("RewardFunctionLimitError: reward function")


FORK_LOOP = """
    import os, time
    def reward_func(queries, prompts, labels):
        for _ in range(40):  # bounded: 40 children that end by themselves within 20 s
            if os.fork() == 0:
                time.sleep(20)
                os._exit(0)
            time.sleep(0.01)
        time.sleep(20)
        return [0.0]
"""


def test_forking_repeatedly_kills_every_process(tmp_path: Path) -> None:
    with runner(tmp_path, FORK_LOOP, processes=4) as fn:
        started = time.monotonic()
        err = broken_limit(fn)
        assert err.limit == "processes"
        assert "limits.processes (4 processes at once): it ran" in str(err)
        assert time.monotonic() - started < 10


def test_printing_a_gigabyte_is_stopped_at_the_cap(tmp_path: Path) -> None:
    counter = tmp_path / "chunks-written"
    body = f"""
        import sys
        def reward_func(queries, prompts, labels):
            for _ in range(16384):  # 16384 x 64 KiB = 1 GiB, no newline anywhere
                sys.stdout.write("x" * 65536)
                sys.stdout.flush()
                with open({str(counter)!r}, "ab") as f:  # one byte per chunk written
                    f.write(b".")
            return [0.0]
        """
    with runner(tmp_path, body, output_bytes=MIB) as fn:
        err = broken_limit(fn)
    assert err.limit == "outputBytes"
    assert f"limits.outputBytes ({MIB} bytes printed or returned per call)" in str(err)
    # It was stopped near the cap (1 MiB: 16 chunks), blocked on the full pipe, not at 1 GiB.
    assert counter.stat().st_size < 64


def test_a_reply_past_the_cap_on_the_protocol_descriptor_is_cut(tmp_path: Path) -> None:
    body = """
        import os
        def reward_func(queries, prompts, labels):
            # Hostile: write to the worker's reply pipe itself, a 4 MiB line with no end.
            fd = next(int(n) for n in sorted(os.listdir("/proc/self/fd"), key=int)
                      if int(n) > 2 and os.readlink(f"/proc/self/fd/{n}").startswith("pipe:"))
            for _ in range(64):
                os.write(fd, b"7" * 65536)
            return [0.0]
        """
    with runner(tmp_path, body, output_bytes=64 * 1024) as fn:
        err = broken_limit(fn)
    assert err.limit == "outputBytes" and "sent a reply of more than" in str(err)


def test_a_large_result_is_refused_by_the_worker(tmp_path: Path) -> None:
    body = """
        def reward_func(queries, prompts, labels):
            return {"rewards": [0.0], "extra_logs": {"x": 1.0}, "junk": "y" * 100000}
        """
    with runner(tmp_path, body, output_bytes=4096) as fn:
        err = broken_limit(fn)
    assert err.limit == "outputBytes" and "returned a reply of" in str(err)


SECRETS = {
    "HF_TOKEN": "hf_secret",
    "WANDB_API_KEY": "wandb-secret",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "RLHF_REMOTE_REWARD_TOKEN": "remote-secret",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    "RAY_AUTH_TOKEN": "ray-secret",
}


def test_the_function_does_not_see_the_jobs_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    body = f"""
        import os
        def reward_func(queries, prompts, labels):
            leaked = [k for k in {sorted(SECRETS)!r} if k in os.environ]
            leaked += [k for k, v in os.environ.items() if v in {sorted(SECRETS.values())!r}]
            if leaked:
                raise RuntimeError(f"the function read {{leaked}}")
            return [float("PATH" in os.environ)]
        """
    with runner(tmp_path, body) as fn:
        assert fn(Q, P, L).rewards.tolist() == [1.0]


def test_worker_env_is_an_allowlist() -> None:
    env = worker_env(
        Path("/pkg"),
        {**SECRETS, "PATH": "/bin", "LC_ALL": "C", "PYTHONPATH": "/x", "HTTPS_PROXY": "u:p@h"},
    )
    assert env == {
        "PATH": "/bin",
        "LC_ALL": "C",
        "PYTHONPATH": f"/pkg{os.pathsep}/x",
        "MALLOC_ARENA_MAX": "2",
        "CUDA_VISIBLE_DEVICES": "",
    }


def test_spinning_past_the_cpu_limit(tmp_path: Path) -> None:
    body = """
        def reward_func(queries, prompts, labels):
            n = 0
            while n < 10**10:  # minutes, were it not stopped after 1 CPU second
                n += 1
            return [0.0]
        """
    with runner(tmp_path, body, cpu_seconds=1) as fn:
        err = broken_limit(fn)
    assert err.limit == "cpuSeconds" and "SIGXCPU" in str(err)


def test_lifting_its_own_cpu_soft_limit_meets_the_hard_one(tmp_path: Path) -> None:
    body = """
        import resource
        def reward_func(queries, prompts, labels):
            _, hard = resource.getrlimit(resource.RLIMIT_CPU)
            resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
            n = 0
            while n < 10**10:
                n += 1
            return [0.0]
        """
    with runner(tmp_path, body, cpu_seconds=1) as fn:
        err = broken_limit(fn)
    assert err.limit == "cpuSeconds" and "hard limit" in str(err)


def test_limits_cannot_be_raised_even_by_root(tmp_path: Path) -> None:
    body = """
        import resource
        def reward_func(queries, prompts, labels):
            caps = [l for l in open("/proc/self/status") if l.startswith("CapEff")][0]
            try:
                resource.setrlimit(resource.RLIMIT_AS, (-1, -1))  # RLIM_INFINITY
            except (ValueError, OSError):
                return [float(int(caps.split()[1], 16) == 0)]
            return [-1.0]
        """
    with runner(tmp_path, body) as fn:
        assert fn(Q, P, L).rewards.tolist() == [1.0]


@pytest.mark.parametrize(
    ("body", "limits", "limit"),
    [
        (
            """
            def reward_func(queries, prompts, labels):
                files = [open(__file__) for _ in range(10000)]
                return [0.0]
            """,
            {"open_files": 32},
            "openFiles",
        ),
        (
            """
            import os, tempfile
            def reward_func(queries, prompts, labels):
                with tempfile.TemporaryFile() as f:
                    for _ in range(64):  # 64 MiB at most
                        f.write(b"x" * (1 << 20))
                        f.flush()
                return [0.0]
            """,
            {"file_size_mib": 1},
            "fileSizeMiB",
        ),
    ],
    ids=["open-files", "file-size"],
)
def test_files(tmp_path: Path, body: str, limits: dict[str, int], limit: str) -> None:
    with runner(tmp_path, body, **limits) as fn:
        err = broken_limit(fn)
    assert err.limit == limit and f"limits.{limit}" in str(err)


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    child_pid = tmp_path / "child.pid"
    body = f"""
        import subprocess, sys, time
        def reward_func(queries, prompts, labels):
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
            open({str(child_pid)!r}, "w").write(str(child.pid))
            time.sleep(30)
            return [0.0]
        """
    with runner(tmp_path, body, timeout=2) as fn:
        with pytest.raises(RewardFunctionTimeout, match="its processes were killed"):
            fn(Q, P, L)
        pid = int(child_pid.read_text())
        assert not Path(f"/proc/{pid}").exists() or "Z" in _state(pid)


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return "gone"
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


def test_a_fresh_worker_runs_after_a_broken_limit(tmp_path: Path) -> None:
    body = """
        def reward_func(queries, prompts, labels):
            if queries[0] == "big":
                return [len(b"x" * (1 << 30))]
            return [1.0]
        """
    with runner(tmp_path, body, memory_mib=256) as fn:
        with pytest.raises(RewardFunctionLimitError):
            fn(["big"], P, L)
        assert fn(Q, P, L).rewards.tolist() == [1.0]


def test_a_worker_past_one_calls_cpu_is_replaced_so_each_call_has_its_budget(
    tmp_path: Path,
) -> None:
    body = """
        import time
        def reward_func(queries, prompts, labels):
            end = time.process_time() + 0.6
            while time.process_time() < end:  # 0.6 CPU seconds per call
                pass
            return [1.0]
        """
    with runner(tmp_path, body, cpu_seconds=1) as fn:
        # 3 x 0.6 s is past the worker's soft limit of its second call (and close to its hard
        # limit): the third call runs in a fresh worker instead.
        for _ in range(3):
            assert fn(Q, P, L).rewards.tolist() == [1.0]
        assert fn.restarts == 1
