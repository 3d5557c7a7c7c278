"""Slow: `rlhf run` of the tiny PPO example with a KL bound it must exceed stops at the first
step over it (the actor is frozen for 2 steps, so step 4 is the first whose samples come from
an updated policy), checkpoints that step and exits `Unhealthy` (65) with the guardrail's
message; run again with the bound raised and `--resume auto`, it continues from that
checkpoint to the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlhf_trainer.config.outcome import ExitCode

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def manifest(tmp_path: Path, name: str, guardrails: dict[str, Any]) -> Path:
    job = yaml.safe_load((EXAMPLES / "tiny-ppo-cpu.yaml").read_text())
    spec = job["spec"]
    spec["models"]["rewardFunction"]["path"] = str(EXAMPLES / "tiny-task" / "reward_func.py")
    spec["data"]["train"][0]["path"] = str(EXAMPLES / "tiny-task" / "prompts.jsonl")
    spec["training"]["maxSteps"] = 6
    spec["checkpoint"] = {"everySteps": 100, "keep": 3, "dir": str(tmp_path / "checkpoints")}
    spec["runPolicy"] = {"guardrails": guardrails}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def rlhf_run(path: Path, run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", "run", str(path), "--run-dir", str(run_dir), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=1500,
        env={**os.environ, "RLHF_TRACEBACK": "1"},
    )


def test_a_kl_bound_stops_the_run_at_a_checkpoint_and_a_raised_bound_resumes(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    tripped = rlhf_run(manifest(tmp_path, "tight", {"maxKl": 1e-9}), run_dir)
    assert tripped.returncode == ExitCode.UNHEALTHY, tripped.stderr[-4000:]
    assert "guardrail runPolicy.guardrails.maxKl tripped at step 4: kl (mean per-token KL" in (
        tripped.stderr
    ), tripped.stderr[-4000:]
    assert "> 1e-09; suspending the job after checkpointing" in tripped.stderr
    checkpoints = tmp_path / "checkpoints"
    complete = [p for p in checkpoints.glob("step-*") if (p / "COMPLETE").exists()]
    assert [int(p.name.removeprefix("step-")) for p in complete] == [4], sorted(
        p.name for p in checkpoints.iterdir()
    )

    resumed = rlhf_run(manifest(tmp_path, "raised", {"maxKl": 10}), run_dir, "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "finished 6 steps (resumed at step 4)" in resumed.stderr, resumed.stderr[-2000:]
