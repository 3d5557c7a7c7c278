"""SIGTERM in the middle of a step (a node drain, a Kueue eviction, a spot reclaim): the run
drops the unfinished step, checkpoints the last finished one, says so, exits `PREEMPTED` (75),
and `rlhf run --resume auto` continues to the very metrics and weights of a run never stopped
(deterministic mode, as in test_resume.py).

The signal lands while step 4's rewards are being computed: a reward function that, in the
stopped run only, marks that moment and then takes a few seconds.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import (
    QUICK,
    JobFile,
    finish,
    read_metrics,
    reward_file,
    rlhf_run,
    step_metrics,
    wait_for_file,
)
from rlhf_trainer.checkpoint import CheckpointManager
from rlhf_trainer.config.outcome import ExitCode

STEPS, STOP_IN = 6, 4
# The reward function runs confined, with an allowlisted environment: the stopped run arms it
# by a file, not by a variable, which the worker would never see.
SLOW_STEP = """import pathlib, time
    if pathlib.Path({armed!r}).exists() and CALLS[0] == {stop_in}:
        pathlib.Path({marker!r}).touch()
        time.sleep(5)"""


@pytest.mark.slow
def test_sigterm_mid_step_checkpoints_the_last_step_and_resumes_exactly(
    job_file: JobFile, tmp_path: Path
) -> None:
    armed, marker = tmp_path / "armed", tmp_path / "scoring-step-4"
    slow_step = SLOW_STEP.format(armed=str(armed), marker=str(marker), stop_in=STOP_IN)
    path = job_file(
        algorithm={"name": "ppo", "normalizeReward": True},
        models={"rewardFunction": {"path": reward_file(tmp_path, slow_step)}},
        rollout=QUICK["rollout"],
        training={**QUICK["training"], "maxSteps": STEPS, "deterministic": True},
        # No periodic checkpoints: the one of step 3 can only come from the preemption.
        checkpoint={"everySteps": 100, "keep": 3},
    )
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    finish(rlhf_run(path, straight))

    armed.touch()
    first = rlhf_run(path, stopped)
    wait_for_file(first, marker)
    armed.unlink()
    first.send_signal(signal.SIGTERM)  # the driver only, as `kill` or a kubelet does
    out, _ = first.communicate(timeout=300)
    assert first.returncode == ExitCode.PREEMPTED, out[-3000:]
    last = [ln for ln in out.splitlines() if ln.startswith("rlhf run:")][-1]
    assert last.startswith("rlhf run: preempted (SIGTERM) after 3 completed steps")
    assert "final checkpoint:" in last and "step-000003" in last
    latest = CheckpointManager(stopped / "checkpoints", keep=3).latest()
    assert latest is not None and latest.step == 3
    assert [r["step"] for r in read_metrics(stopped)] == [1, 2, 3]  # step 4 dropped whole
    assert not (stopped / "final").exists()

    out = finish(rlhf_run(path, stopped, "--resume", "auto"))
    assert f"finished {STEPS} steps (resumed at step 3)" in out
    a, b = step_metrics(straight), step_metrics(stopped)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert a[step] == b[step], f"step {step} differs"
    for role in ("actor", "critic"):
        weights_a = load_file(straight / "final" / role / "model.safetensors")
        weights_b = load_file(stopped / "final" / role / "model.safetensors")
        assert weights_a.keys() == weights_b.keys()
        for name in weights_a:
            assert torch.equal(weights_a[name], weights_b[name]), f"{role}: {name}"
