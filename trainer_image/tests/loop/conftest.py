"""Job files for end-to-end runs: the tiny example manifest's spec, with overrides.

Every run here is real: local Ray, DeepSpeed ranks, vLLM (or HF generate), a tiny random-init
Llama, the repeat-letter task with the example's reward-function file.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "manifests" / "examples" / "tiny-ppo-cpu.yaml"
TINY_TASK = REPO / "manifests" / "examples" / "tiny-task"

JobFile = Callable[..., Path]


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `changes` into a copy of `base` (None writes an explicit null)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def example_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())["spec"]
    spec["models"]["rewardFunction"]["path"] = str(TINY_TASK / "reward_func.py")
    spec["data"]["train"] = [{"path": str(TINY_TASK / "prompts.jsonl")}]
    return spec


@pytest.fixture
def job_file(tmp_path: Path) -> JobFile:
    """`job_file(name="job", **section_overrides)` -> path of a bare job config (YAML)."""

    def write(name: str = "job", **changes: Any) -> Path:
        spec = merge(example_spec(), changes)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return write


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The step records of `metrics.jsonl` (checkpoint records skipped)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [r for r in records if r.get("event") == "step"]


# Small and fast: 2 steps of 4 prompts x 2 samples, 8 new tokens.
QUICK = {
    "rollout": {"samplesPerPrompt": 2, "maxNewTokens": 8},
    "training": {
        "rolloutBatchSize": 4,
        "trainBatchSize": 8,
        "microTrainBatchSize": 4,
        "microRolloutBatchSize": 8,
        "maxSteps": 2,
        "freezeActorSteps": 0,
    },
    "checkpoint": {"everySteps": 1, "keep": 2},
}


def is_wall_clock(metric: str) -> bool:
    """Seconds and rates (`update_s`, `samples_per_s`, ...) differ run to run by nature."""
    return metric.endswith("_s")


def step_metrics(run_dir: Path) -> dict[int, dict[str, float]]:
    """Each step's metrics but the wall-clock ones; a resumed run appends, its record wins."""
    out: dict[int, dict[str, float]] = {}
    for record in read_metrics(run_dir):
        out[record["step"]] = {k: v for k, v in record["metrics"].items() if not is_wall_clock(k)}
    return out


def assert_resume_was_exact(
    straight: Path, resumed: Path, *, steps: int, written_before: int, resumed_at: int
) -> None:
    """A run resumed at step `resumed_at` (after `written_before` step records) redid exactly
    the steps after it, and every step's metrics and the final weights equal those of the
    run never interrupted."""
    from safetensors.torch import load_file

    redone = [r["step"] for r in read_metrics(resumed)[written_before:]]
    assert redone == list(range(resumed_at + 1, steps + 1))
    a, b = step_metrics(straight), step_metrics(resumed)
    assert sorted(a) == sorted(b) == list(range(1, steps + 1))
    for step in range(1, steps + 1):
        assert a[step] == b[step], f"step {step} differs"
    weights_a = load_file(straight / "final" / "actor" / "model.safetensors")
    weights_b = load_file(resumed / "final" / "actor" / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        assert torch.equal(weights_a[name], weights_b[name]), name


def rlhf_run(
    path: Path, run_dir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`rlhf run` in a process of its own, stdout and stderr together."""
    return subprocess.Popen(
        [sys.executable, "-m", "rlhf_trainer", "run", str(path), "--run-dir", str(run_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,  # its own process group: a kill of the group takes Ray along
    )


def wait_for_file(proc: subprocess.Popen[str], path: Path, timeout: float = 600) -> None:
    """Until `path` exists; fails if the run ends first or it takes longer than `timeout`."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"run ended before {path} appeared: {out[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.2)


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


# A reward-function file that calls the tiny task's own, with `body` run first at every call
# (CALLS[0] counts the calls: one per step).
WRAPPED_REWARD = """
import importlib.util

_spec = importlib.util.spec_from_file_location("tiny_reward", {base!r})
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)
CALLS = [0]


def reward_func(queries, prompts, labels):
    CALLS[0] += 1
    {body}
    return _base.reward_func(queries, prompts, labels)
"""


def reward_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "reward.py"
    path.write_text(WRAPPED_REWARD.format(base=str(TINY_TASK / "reward_func.py"), body=body))
    return str(path)


# A killed run must stop between a checkpoint (step N) and its last step, and tiny steps are
# quicker than the test's poll: while `armed` exists, the reward function holds every call
# made once the checkpoint is there, until the kill. Armed by a file, not by a variable: the
# reward runs confined, with an allowlisted environment.
HOLD_AFTER_CHECKPOINT = """import pathlib, time
    armed, marker = pathlib.Path({armed!r}), pathlib.Path({marker!r})
    for _ in range(300):
        if not (armed.exists() and marker.exists()):
            break
        time.sleep(0.1)"""


def holding_reward(tmp_path: Path, marker: Path) -> tuple[dict[str, Any], Path]:
    """The `models` section whose reward holds once `marker` exists while the returned file
    exists (the tiny task's reward otherwise), and that file (not yet created)."""
    armed = tmp_path / "armed"
    body = HOLD_AFTER_CHECKPOINT.format(armed=str(armed), marker=str(marker))
    return {"rewardFunction": {"path": reward_file(tmp_path, body)}}, armed


def kill_after_checkpoint(
    proc: subprocess.Popen[str], marker: Path, armed: Path, timeout: float = 600
) -> None:
    """SIGKILL the run (its process group: Ray goes too) once `marker` exists, then disarm
    the reward `holding_reward` gave it, for the run that resumes."""
    wait_for_file(proc, marker, timeout)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    armed.unlink()
