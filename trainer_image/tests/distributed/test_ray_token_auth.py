"""Ray's token authentication, as every job's pods use it: a head started with
`RAY_AUTH_MODE=token` and the job's token (what KubeRay's `authOptions` and the operator's pod
env give the head), a client with the same two variables (the submitter, the driver) submits a
job and it runs; a client without the token, or with another, is refused.

Real Ray (2.60, with its dashboard: `ray[default]`), on loopback ports of its own, in a process
group of its own that the test ends (never `ray stop`, which would end every Ray on the machine).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("ray.dashboard.modules.job.cli", reason="needs ray[default] (the job API)")
RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
START_TIMEOUT_S = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Head:
    dashboard: str
    token: str
    home: Path  # a HOME without ~/.ray/auth_token: no client finds a token by accident


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), **extra)
    return env


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    if RAY is None:
        pytest.skip("the `ray` CLI is not installed")
    home = tmp_path_factory.mktemp("home")
    # Ray's session paths (sockets) must stay short: a short dir of our own under /tmp.
    temp = Path(tmp_path_factory.mktemp("r", numbered=True))
    token = secrets.token_urlsafe(32)
    port, dashboard = _free_port(), _free_port()
    command = [
        RAY,
        "start",
        "--head",
        "--block",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=1",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}",
        f"--ray-client-server-port={_free_port()}",
        f"--dashboard-agent-listen-port={_free_port()}",
        f"--temp-dir={temp}",
        "--disable-usage-stats",
    ]
    log = open(temp / "head.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        command,
        env=_env(home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: ended as a whole below
    )
    url = f"http://127.0.0.1:{dashboard}"
    try:
        _wait_for_job_api(url, token, home, process, temp / "head.log")
        yield Head(url, token, home)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        log.close()


def _submit(head: Head, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    assert RAY is not None
    return subprocess.run(
        [RAY, "job", "submit", f"--address={head.dashboard}", *args],
        env=_env(head.home, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _wait_for_job_api(
    url: str, token: str, home: Path, process: subprocess.Popen[bytes], log: Path
) -> None:
    assert RAY is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"ray start exited {process.returncode}:\n{log.read_text()[-3000:]}")
        listed = subprocess.run(
            [RAY, "job", "list", f"--address={url}"],
            env=_env(home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if listed.returncode == 0:
            return
        time.sleep(1.0)
    pytest.fail(
        f"the job API did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}"
    )


@pytest.mark.slow
def test_a_client_with_the_jobs_token_submits_and_others_are_refused(head: Head) -> None:
    # The driver joins the cluster as the trainer does (ray.init on RAY_ADDRESS, which the job
    # supervisor sets) with the head's token in its environment, and runs a task on it.
    driver = (
        "import os, ray; ray.init(address=os.environ['RAY_ADDRESS']); "
        "print('ran with the token', ray.get(ray.remote(lambda: 41 + 1).remote()))"
    )
    ok = _submit(
        head, "--", sys.executable, "-c", driver, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=head.token
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ran with the token 42" in ok.stdout

    entrypoint = ["--", sys.executable, "-c", "print('ran with the token')"]

    # No token at all (RAY_AUTH_MODE unset: a pod of another job, a stray client).
    anonymous = _submit(head, *entrypoint)
    assert anonymous.returncode != 0
    said = anonymous.stdout + anonymous.stderr
    assert "Unauthorized" in said or "authentication" in said.lower(), said
    assert "ran with the token" not in said

    # Token mode with someone else's token.
    wrong = _submit(head, *entrypoint, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="x" * 43)
    assert wrong.returncode != 0
    said = wrong.stdout + wrong.stderr
    assert "Unauthorized" in said or "authentication" in said.lower(), said
    assert "ran with the token" not in said
