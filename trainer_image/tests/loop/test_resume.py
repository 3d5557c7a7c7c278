"""Resume is exact: N steps straight == N/2 steps, SIGKILL, resume for the rest.

Deterministic mode (`training.deterministic`): per-prompt sampling seeds, no vLLM prefix
cache, deterministic torch kernels. What a checkpoint restores: the actor's and critic's
DeepSpeed states (weights, Adam moments, LR scheduler), every rank's RNG, the data position,
the KL coefficient and the reward normaliser; the vLLM engines get the restored weights.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import QUICK, JobFile, read_metrics

STEPS = 6


def is_wall_clock(metric: str) -> bool:
    """Seconds and rates (`update_s`, `samples_per_s`, ...) differ run to run by nature."""
    return metric.endswith("_s")


def rlhf_run(path: Path, run_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rlhf_trainer", "run", str(path), "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the kill takes Ray down with it
    )


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


def kill_after_checkpoint(proc: subprocess.Popen[str], marker: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(
                f"run ended before {marker} appeared: {proc.stdout.read()[-3000:]}"
            )  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            raise AssertionError(f"{marker} did not appear within {timeout} s")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def step_metrics(run_dir: Path) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for record in read_metrics(run_dir):  # a resumed run appends: the last record of a step wins
        out[record["step"]] = {k: v for k, v in record["metrics"].items() if not is_wall_clock(k)}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_resume_after_kill_reproduces_the_straight_run(
    algorithm: str, job_file: JobFile, tmp_path: Path
) -> None:
    training = {**QUICK["training"], "maxSteps": STEPS, "deterministic": True}
    path = job_file(
        algorithm={"name": algorithm, "normalizeReward": True},
        rollout=QUICK["rollout"],
        training=training,
        checkpoint={"everySteps": STEPS // 2, "keep": 3},
    )
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    finish(rlhf_run(path, straight))

    first = rlhf_run(path, resumed)
    kill_after_checkpoint(first, resumed / "checkpoints" / "step-000003" / "COMPLETE")
    written_before = len(read_metrics(resumed))
    assert written_before < STEPS, "the first run was not interrupted"
    out = finish(rlhf_run(path, resumed))
    assert f"finished {STEPS} steps" in out
    redone = [r["step"] for r in read_metrics(resumed)[written_before:]]
    assert redone == list(range(STEPS // 2 + 1, STEPS + 1))

    a, b = step_metrics(straight), step_metrics(resumed)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert a[step] == b[step], f"step {step} differs"

    weights_a = load_file(straight / "final" / "actor" / "model.safetensors")
    weights_b = load_file(resumed / "final" / "actor" / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        assert torch.equal(weights_a[name], weights_b[name]), name
