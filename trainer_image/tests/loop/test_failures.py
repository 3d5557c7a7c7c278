"""Failures stop the run with one clear message, a final checkpoint when the models are in a
consistent state, nothing half-written, and an exit code that says whether a retry can help.

- a reward function that raises at its third batch: final checkpoint of step 2, and exit 78
  (a bug in the job's code: a retry would replay the same batch into it);
- a remote reward service that goes away after two batches: final checkpoint of step 2;
- rewards so large that the critic's loss overflows: every rank stops before its backward
  pass; if no rank had stepped yet the final checkpoint holds step 2, else (the actor, which
  trains at the same time, had stepped) no checkpoint is written and step 2's stays newest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import QUICK, JobFile, read_metrics, reward_file
from rlhf_trainer.checkpoint import CheckpointManager
from rlhf_trainer.config.outcome import ExitCode


def run_failing(path: Path, run_dir: Path, code: ExitCode = ExitCode.FAILED) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", "run", str(path), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == code, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rlhf run:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def assert_final_checkpoint(run_dir: Path, step: int) -> None:
    root = run_dir / "checkpoints"
    latest = CheckpointManager(root, keep=5).latest()
    assert latest is not None and latest.step == step
    assert (latest.path / "actor").is_dir() and (latest.path / "trainer_state.json").is_file()
    assert not [p.name for p in root.iterdir() if p.name.startswith(".tmp")]


# No periodic checkpoints: any checkpoint on disk is the one written after the failure.
NO_PERIODIC = {"everySteps": 100, "keep": 5}
STEPS = {**QUICK["training"], "maxSteps": 5}


@pytest.mark.slow
def test_failing_reward_function(job_file: JobFile, tmp_path: Path) -> None:
    body = 'if CALLS[0] == 3:\n        raise ValueError("the verifier crashed on batch 3")'
    path = job_file(
        models={"rewardFunction": {"path": reward_file(tmp_path, body)}},
        rollout=QUICK["rollout"],
        training=STEPS,
        checkpoint=NO_PERIODIC,
    )
    line = run_failing(path, tmp_path / "run", ExitCode.INVALID)
    assert "after 2 completed steps" in line
    assert "raised an exception" in line and "the verifier crashed on batch 3" in line
    assert "final checkpoint:" in line and "step-000002" in line
    assert_final_checkpoint(tmp_path / "run", 2)
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [1, 2]


class _Scorer(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = json.dumps({"rewards": [0.5] * len(body["query"])}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
        self.server.calls += 1  # type: ignore[attr-defined]
        if self.server.calls == 2:  # type: ignore[attr-defined]
            # Gone after two batches: stop listening (the reply above is still delivered).
            threading.Thread(target=self.server.shutdown).start()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def vanishing_reward_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scorer)
    server.calls = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/score"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_unreachable_remote_reward_model(
    job_file: JobFile, tmp_path: Path, vanishing_reward_server: str
) -> None:
    path = job_file(
        models={
            "rewardFunction": None,
            "remoteReward": {
                "url": vanishing_reward_server,
                "retries": 1,
                "timeoutSeconds": 2,
                "allowInsecureHttp": True,
            },
        },
        rollout=QUICK["rollout"],
        training=STEPS,
        checkpoint=NO_PERIODIC,
    )
    line = run_failing(path, tmp_path / "run")
    assert "after 2 completed steps" in line
    assert f"remote reward {vanishing_reward_server}" in line
    assert "no valid answer after 2 attempt(s)" in line
    assert_final_checkpoint(tmp_path / "run", 2)


@pytest.mark.slow
def test_non_finite_loss_before_any_update_keeps_a_final_checkpoint(
    job_file: JobFile, tmp_path: Path
) -> None:
    # Finite but huge rewards from step 3 on (no clipping): the critic's squared error
    # overflows float32, so its loss is inf at the first micro-batch. The actor is still in
    # its warm-up (frozen), so no rank has stepped: the models are those of step 2.
    path = job_file(
        algorithm={"rewardClip": None},
        models={"rewardFunction": {"path": reward_file(tmp_path, HUGE_FROM_3)}},
        rollout=QUICK["rollout"],
        training={**STEPS, "freezeActorSteps": 5},
        checkpoint=NO_PERIODIC,
    )
    line = run_failing(path, tmp_path / "run")
    assert "after 2 completed steps" in line
    assert "NonFiniteLossError" in line and "critic loss is not finite" in line
    assert "final checkpoint:" in line and "step-000002" in line
    assert_final_checkpoint(tmp_path / "run", 2)


@pytest.mark.slow
def test_non_finite_loss_after_a_partial_update_leaves_the_last_checkpoint(
    job_file: JobFile, tmp_path: Path
) -> None:
    # Same overflow, but the actor trains at the same time and takes its step: actor and
    # critic no longer belong to one state, so no checkpoint is written for step 3; the
    # periodic checkpoint of step 2 stays the newest, untouched.
    path = job_file(
        algorithm={"rewardClip": None},
        models={"rewardFunction": {"path": reward_file(tmp_path, HUGE_FROM_3)}},
        rollout=QUICK["rollout"],
        training=STEPS,
        checkpoint={"everySteps": 1, "keep": 5},
    )
    line = run_failing(path, tmp_path / "run")
    assert "critic loss is not finite" in line
    assert "no final checkpoint (models not in a consistent state)" in line
    assert "step-000002" in line
    assert_final_checkpoint(tmp_path / "run", 2)


HUGE_FROM_3 = "if CALLS[0] >= 3:\n        return [1e30] * len(queries)"
