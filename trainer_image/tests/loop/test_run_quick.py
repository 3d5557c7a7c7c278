"""`rlhf run` end to end, fast enough for the default suite: 2 steps on the HF-engine path.

Real Ray (placement groups on a custom resource), DeepSpeed actor/critic ranks, a reference
rank, the reward-function file in its own process, checkpoints and the final HF export.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import QUICK, JobFile, finish, read_metrics, rlhf_run
from rlhf_trainer.checkpoint import CheckpointManager
from rlhf_trainer.cli import main
from rlhf_trainer.config.outcome import ExitCode


def test_two_ppo_steps_with_the_hf_engine(job_file: JobFile, tmp_path: Path) -> None:
    path = job_file(
        rollout={**QUICK["rollout"], "engine": "hf"},
        **{k: v for k, v in QUICK.items() if k != "rollout"},
    )
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", "run", str(path), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "finished 2 steps" in proc.stderr

    steps = read_metrics(run_dir)
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:
        timings, metrics = record["timings"], record["metrics"]
        assert {"generation", "make_experience", "training", "weight_sync", "total"} <= set(timings)
        assert 0.0 <= metrics["reward"] <= 1.0
        assert metrics["optimizer_steps"] == 1.0  # 8 samples, trainBatchSize 8
        assert "value_loss" in metrics and "policy_loss" in metrics

    checkpoints = CheckpointManager(run_dir / "checkpoints", keep=2)
    latest = checkpoints.latest()
    assert latest is not None and latest.step == 2
    assert [c.step for c in checkpoints.checkpoints()] == [1, 2]
    assert (latest.path / "trainer_state.json").is_file()
    assert (latest.path / "actor").is_dir() and (latest.path / "critic").is_dir()

    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    actor = AutoModelForCausalLM.from_pretrained(run_dir / "final" / "actor")
    critic = AutoModelForSequenceClassification.from_pretrained(run_dir / "final" / "critic")
    assert actor.config.hidden_size == 64 and critic.config.num_labels == 1
    assert (run_dir / "tensorboard").is_dir()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"training": {"attnImplementation": "flash_attention_2"}},
            "training.attnImplementation: flash_attention_2 runs on CUDA GPUs only",
            id="flash-attention-on-cpu",
        ),
        pytest.param(
            {
                "rollout": {"enableSleep": True},
                "placement": {"colocateAll": True},
                "training": {"freezeActorSteps": 0},
            },
            "rollout.enableSleep: vLLM sleep mode is not supported on CPUs",
            id="vllm-sleep-on-cpu",
        ),
    ],
)
def test_unsupported_options_are_refused_by_field(
    changes: dict[str, object], message: str, job_file: JobFile, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(job_file(**changes))]) == ExitCode.INVALID
    assert message in capsys.readouterr().err


def test_invalid_job_file_fails_with_the_problems(
    job_file: JobFile, capsys: pytest.CaptureFixture[str]
) -> None:
    path = job_file(algorithm={"name": "grpo"}, rollout={"samplesPerPrompt": 1})
    assert main(["run", str(path)]) == ExitCode.INVALID
    err = capsys.readouterr().err
    assert "rollout.samplesPerPrompt: must be > 1 for algorithm grpo (got 1)" in err


def test_missing_reward_function_file_is_named(
    job_file: JobFile, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = job_file(models={"rewardFunction": {"path": str(tmp_path / "nope.py")}}, **QUICK)
    assert main(["run", str(path), "--run-dir", str(tmp_path / "r")]) == ExitCode.INVALID
    assert "nope.py" in capsys.readouterr().err


def test_a_reward_function_that_does_not_import_fails_before_the_cluster_starts(
    job_file: JobFile, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = tmp_path / "reward.py"
    broken.write_text("import no_such_module\n")
    path = job_file(models={"rewardFunction": {"path": str(broken)}}, **QUICK)
    run_dir = tmp_path / "r"
    assert main(["run", str(path), "--run-dir", str(run_dir)]) == ExitCode.INVALID
    err = capsys.readouterr().err
    assert "RewardFunctionLoadError: reward function reward.py: cannot load" in err
    assert "ModuleNotFoundError: No module named 'no_such_module'" in err
    assert not run_dir.exists()  # refused while loading: no reporter, no cluster


@pytest.mark.slow  # the trained models compile: ~1 min on 2 cores
def test_compiled_trained_models_learn_as_the_eager_ones(job_file: JobFile, tmp_path: Path) -> None:
    """`training.compile`: the actor and critic compiled in their DeepSpeed ranks; the first
    step (same rollouts: the HF engine samples from the initial weights) has the eager run's
    losses, to float tolerance."""
    runs = {}
    for compiled in (False, True):
        path = job_file(
            rollout={**QUICK["rollout"], "engine": "hf"},
            training={**QUICK["training"], "maxSteps": 1, "compile": compiled},
            checkpoint=QUICK["checkpoint"],
        )
        run_dir = tmp_path / f"run-{compiled}"
        finish(rlhf_run(path, run_dir))
        [record] = read_metrics(run_dir)
        runs[compiled] = record["metrics"]
    for metric in ("policy_loss", "value_loss", "reward"):
        assert runs[True][metric] == pytest.approx(runs[False][metric], rel=1e-3, abs=1e-5)
