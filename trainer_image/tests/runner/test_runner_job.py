"""The runner's pieces that need no cluster: directories, step counting, teardown, the SIGTERM
flag, the atomic export, and `rlhf run`'s exit code for jobs it refuses before training."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlhf_trainer.checkpoint import publish_dir
from rlhf_trainer.cli import main
from rlhf_trainer.config import JobConfig
from rlhf_trainer.config.outcome import ExitCode
from rlhf_trainer.context.job import JobError, RunContext, RunDirs, run_dirs, total_steps
from rlhf_trainer.context.preemption import StopOnSignal
from rlhf_trainer.distributed.ray_session import _keep_sigterm_handler


def job(algorithm: str = "sft", **sections: dict[str, Any]) -> JobConfig:
    doc: dict[str, Any] = {
        "algorithm": {"name": algorithm},
        "models": {"actor": {"pretrained": "/m"}},
        "data": {"train": [{"path": "d.jsonl"}]},
    }
    if algorithm == "grpo":
        doc["models"]["rewardFunction"] = {"builtin": "repeat-letter"}
        doc["rollout"] = {"samplesPerPrompt": 4}
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    return JobConfig.model_validate(doc)


@pytest.mark.parametrize(
    ("run_dir", "checkpoint_dir", "run", "checkpoints"),
    [
        (None, None, "/cwd/runs/tiny", "/cwd/runs/tiny/checkpoints"),
        ("out", None, "/cwd/out", "/cwd/out/checkpoints"),
        ("/abs/out", None, "/abs/out", "/abs/out/checkpoints"),
        # Like every path of a job: from the job file's directory, not the current one.
        (None, "ckpt", "/cwd/runs/tiny", "/jobs/ckpt"),
        ("out", "/pvc/ckpt", "/cwd/out", "/pvc/ckpt"),
    ],
    ids=["defaults", "relative-run-dir", "absolute-run-dir", "relative-ckpt", "absolute-ckpt"],
)
def test_run_dirs(
    run_dir: str | None, checkpoint_dir: str | None, run: str, checkpoints: str
) -> None:
    cfg = job(checkpoint={"dir": checkpoint_dir})
    dirs = run_dirs(
        cfg,
        name="tiny",
        base_dir=Path("/jobs"),
        run_dir=Path(run_dir) if run_dir else None,
        cwd=Path("/cwd"),
    )
    assert dirs == RunDirs(Path(run), Path(checkpoints))
    assert dirs.final == Path(run) / "final"


@pytest.mark.parametrize(
    ("algorithm", "training", "items", "steps"),
    [
        ("sft", {"trainBatchSize": 8}, 64, 8),
        ("sft", {"trainBatchSize": 8, "epochs": 3}, 64, 24),
        ("sft", {"trainBatchSize": 8}, 60, 7),  # the last partial batch is dropped
        ("dpo", {"trainBatchSize": 8, "maxSteps": 100}, 64, 100),
        ("grpo", {"rolloutBatchSize": 4, "trainBatchSize": 16}, 10, 2),
        ("grpo", {"rolloutBatchSize": 4, "trainBatchSize": 16, "numEpisodes": 2}, 10, 5),
    ],
    ids=["sft-epoch", "sft-epochs", "sft-partial", "max-steps", "grpo-episode", "grpo-episodes"],
)
def test_total_steps(algorithm: str, training: dict[str, int], items: int, steps: int) -> None:
    assert total_steps(job(algorithm, training=training), items) == steps


@pytest.mark.parametrize(
    ("algorithm", "training", "message"),
    [
        ("sft", {"trainBatchSize": 8}, r"training.trainBatchSize: 8 is larger than the data "),
        ("grpo", {"rolloutBatchSize": 8, "trainBatchSize": 32}, r"rolloutBatchSize: 8 is larger"),
    ],
    ids=["offline", "online"],
)
def test_too_little_data_for_one_step_is_a_job_error(
    algorithm: str, training: dict[str, int], message: str
) -> None:
    with pytest.raises(JobError, match=message):
        total_steps(job(algorithm, training=training), 5)


def test_teardown_runs_every_closer_last_first_even_when_one_fails(tmp_path: Path) -> None:
    ran: list[str] = []
    ctx = RunContext(job(), "tiny", tmp_path, RunDirs(tmp_path / "run", tmp_path / "c"))

    def fail() -> None:
        ran.append("failing")
        raise RuntimeError("already gone")

    ctx.on_close(lambda: ran.append("ray"))
    ctx.on_close(fail)
    ctx.on_close(lambda: ran.append("cluster"))
    ctx.close()
    assert ran == ["cluster", "failing", "ray"]


def test_the_reporter_is_built_on_first_use_and_closed_at_teardown(tmp_path: Path) -> None:
    ctx = RunContext(
        job(logging={"tensorboard": False}),
        "tiny",
        tmp_path,
        RunDirs(tmp_path / "run", tmp_path / "c"),
    )
    assert not (tmp_path / "run").exists()  # nothing written before training starts
    reporter = ctx.reporter()
    assert ctx.reporter() is reporter
    reporter.on_step(1, 2, {"loss": 1.0}, {"total": 1.0}, 8)
    ctx.close()
    assert '"step": 1' in (tmp_path / "run" / "metrics.jsonl").read_text()


def test_sigterm_sets_the_flag_and_a_second_one_is_not_caught() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopOnSignal() as stop:
        assert not stop()
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next line
        assert stop()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) == before


def test_ray_init_does_not_replace_the_runners_sigterm_handler() -> None:
    with StopOnSignal() as stop:
        with _keep_sigterm_handler():
            signal.signal(signal.SIGTERM, lambda *_: None)  # what ray.init does
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop()


def test_publish_dir_replaces_the_old_export_and_never_leaves_half_a_one(tmp_path: Path) -> None:
    final = tmp_path / "final"

    def write(version: str) -> Any:
        return lambda d: (d / "actor").mkdir() or (d / "actor" / "weights").write_text(version)

    publish_dir(write("1"), final)
    publish_dir(write("2"), final)
    assert (final / "actor" / "weights").read_text() == "2"

    def fail(d: Path) -> None:
        (d / "weights").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        publish_dir(fail, final)
    assert (final / "actor" / "weights").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def write_job(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("section", "key", "value", "problem"),
    [
        ("rollout", "samplesPerPrompt", 1, "rollout.samplesPerPrompt: must be > 1 for algorithm"),
        ("training", "trainBatchSize", 0, "training.trainBatchSize: Input should be greater than"),
    ],
    ids=["cross-field", "field"],
)
def test_an_invalid_job_exits_78_naming_the_field(
    section: str,
    key: str,
    value: int,
    problem: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = job("grpo").to_manifest()
    doc[section][key] = value
    code = main(["run", str(write_job(tmp_path / "job.yaml", doc))])
    assert code == ExitCode.INVALID == 78
    assert problem in capsys.readouterr().err


def test_a_missing_data_file_exits_78_before_any_cluster_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_model_dir: Path
) -> None:
    doc = job(models={"actor": {"pretrained": str(tiny_model_dir)}}).to_manifest()
    run_dir = tmp_path / "run"
    code = main(["run", str(write_job(tmp_path / "job.yaml", doc)), "--run-dir", str(run_dir)])
    assert code == 78
    err = capsys.readouterr().err
    assert "DataLoadError: data path 'd.jsonl' does not exist" in err
    assert str(tmp_path / "d.jsonl") in err  # read against the job file's directory
    assert not run_dir.exists()  # no reporter, no checkpoints, no cluster: nothing started


@pytest.mark.parametrize(
    ("algorithm", "online"),
    [("grpo", True), ("sft", False), ("dpo", False)],
    ids=["grpo", "sft", "dpo"],
)
def test_one_runner_dispatches_to_the_online_or_the_offline_train_function(
    algorithm: str, online: bool
) -> None:
    from rlhf_trainer.loop.train import train_online
    from rlhf_trainer.offline.train import train_offline
    from rlhf_trainer.runner.main import train_function

    expected = train_online if online else train_offline
    assert train_function(job(algorithm)) is expected
