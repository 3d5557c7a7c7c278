"""The Ray pods' preStop hook (`rlhf prestop`) against a real Ray head with its job API: it
stops the running job, whose driver gets SIGTERM from Ray's job supervisor, and returns only
once the driver has finished what it does on SIGTERM (the trainer: checkpoint the last finished
step); a second pod's hook finds nothing to stop, and a hook that cannot reach the head (the
cluster is gone) returns at once. Slow: the head takes seconds to start."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_ray_token_auth import RAY, Head, _env, _free_port, head

from rlhf_trainer.distributed.prestop import dashboard_address

__all__ = ["head"]  # the fixture: one Ray head with token authentication, for this module

# A driver as the trainer behaves on SIGTERM: it finishes its "checkpoint" (argv[2] seconds:
# less than the 3 s Ray's job supervisor waits by default), records it, and exits with the
# trainer's Preempted exit code.
DRIVER = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def stop(signum, frame):
    time.sleep(float(sys.argv[2]))
    (out / "checkpointed").write_text("step 7")
    sys.exit(75)
signal.signal(signal.SIGTERM, stop)
(out / "started").write_text("")
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize(
    ("env", "address"),
    [
        ({"RAY_ADDRESS": "127.0.0.1:6379"}, "http://127.0.0.1:8265"),  # KubeRay's head
        (
            {"RAY_ADDRESS": "job-r0-head-svc.team-a.svc.cluster.local:6379"},  # a worker
            "http://job-r0-head-svc.team-a.svc.cluster.local:8265",
        ),
        ({"RAY_API_SERVER_ADDRESS": "http://10.0.0.5:9000"}, "http://10.0.0.5:9000"),
        ({}, "http://127.0.0.1:8265"),
    ],
    ids=["head", "worker", "ray-api-server-address", "nothing-set"],
)
def test_the_hook_finds_the_heads_job_api(env: dict[str, str], address: str) -> None:
    assert dashboard_address(env) == address


def _hook(head: Head, wait_s: str = "60", address: str | None = None) -> tuple[str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", "prestop"],
        env=_env(
            head.home,
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=head.token,
            RAY_API_SERVER_ADDRESS=address or head.dashboard,
            RAY_JOB_STOP_WAIT_TIME_S=wait_s,
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # a hook never fails the pod's end
    return done.stdout + done.stderr, time.monotonic() - started


def _submit_driver(head: Head, job_id: str, out: Path, checkpoint_s: float = 1.0) -> None:
    assert RAY is not None
    command = [RAY, "job", "submit", f"--address={head.dashboard}", "--no-wait"]
    submitted = subprocess.run(
        [
            *command,
            "--submission-id",
            job_id,
            "--",
            sys.executable,
            "-c",
            DRIVER,
            str(out),
            str(checkpoint_s),
        ],
        env=_env(head.home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=head.token),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    deadline = time.monotonic() + 60
    while not (out / "started").exists():
        assert time.monotonic() < deadline, f"the driver of {job_id} did not start"
        time.sleep(0.2)


def _status(head: Head, job_id: str) -> str:
    assert RAY is not None
    said = subprocess.run(
        [RAY, "job", "status", f"--address={head.dashboard}", job_id],
        env=_env(head.home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=head.token),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return said.stdout + said.stderr


@pytest.mark.slow
def test_the_hook_returns_once_the_driver_has_checkpointed(head: Head, tmp_path: Path) -> None:
    _submit_driver(head, "trainer-r0", tmp_path)
    said, _ = _hook(head)
    assert "rlhf prestop: stopped trainer-r0" in said, said
    # The driver's SIGTERM handler ran to its end before the hook returned.
    assert (tmp_path / "checkpointed").read_text() == "step 7"
    assert "was stopped" in _status(head, "trainer-r0")
    # The next pod's hook (the head's after a worker's): nothing left to stop.
    said, _ = _hook(head)
    assert "rlhf prestop: no Ray job was running" in said, said


@pytest.mark.slow
def test_the_hook_gives_up_at_the_grace_period(head: Head, tmp_path: Path) -> None:
    _submit_driver(head, "trainer-r1", tmp_path, checkpoint_s=2.5)
    said, _ = _hook(head, wait_s="0.2")  # shorter than the driver's checkpoint
    assert "rlhf prestop: trainer-r1 still running at the deadline" in said, said
    assert not (tmp_path / "checkpointed").exists()


def test_a_hook_that_cannot_reach_the_head_returns_at_once(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{_free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", "prestop"],
        env=_env(tmp_path, RAY_API_SERVER_ADDRESS=nobody),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert f"Ray's job API at {nobody} did not answer" in done.stdout, done.stdout + done.stderr
