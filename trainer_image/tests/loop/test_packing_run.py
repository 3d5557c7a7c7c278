"""`rlhf run` with `training.packingSamples` (slow): PPO's actor, critic and reference ranks
on packed rows compute the padded run's step (HF engine, deterministic sampling)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import QUICK, JobFile, read_metrics

# Step 1 of both runs sees the same samples (same weights, per-prompt seeds); what the ranks
# compute from them must agree up to float rounding.
COMPARED = ("values", "value_loss", "returns", "entropy", "reward", "advantages_abs")


@pytest.mark.slow
def test_packed_ppo_step_equals_the_padded_one(job_file: JobFile, tmp_path: Path) -> None:
    metrics = {}
    for packed in (False, True):
        path = job_file(
            f"packed-{packed}",
            algorithm={"klCoef": 0.01},
            rollout={**QUICK["rollout"], "engine": "hf"},
            training={**QUICK["training"], "packingSamples": packed},
            checkpoint={"everySteps": 10},
        )
        run_dir = tmp_path / f"run-{packed}"
        proc = subprocess.run(
            [sys.executable, "-m", "rlhf_trainer", "run", str(path), "--run-dir", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        metrics[packed] = read_metrics(run_dir)[0]["metrics"]
    for key in COMPARED:
        assert metrics[True][key] == pytest.approx(metrics[False][key], rel=1e-4, abs=1e-6), key
