"""`run_offline`'s edges that need no cluster: steps, overrides, clear errors, atomic export."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlhf_trainer.config import JobConfig, ResumePolicy
from rlhf_trainer.offline.driver import publish_dir
from rlhf_trainer.offline.run import OfflineJobError, run_offline, total_steps

from .jobs import offline_job
from .synthetic import sft_rows, write_jsonl


@pytest.mark.parametrize(
    ("samples", "epochs", "max_steps", "steps"),
    [(64, 1, None, 8), (64, 3, None, 24), (60, 1, None, 7), (64, 1, 100, 100)],
    ids=["one-epoch", "three-epochs", "last-partial-batch-dropped", "max-steps-wins"],
)
def test_total_steps(samples: int, epochs: int, max_steps: int | None, steps: int) -> None:
    job = offline_job(
        "sft", Path("/m"), "d.jsonl", steps=max_steps, lr=1e-3, training_extra={"epochs": epochs}
    )
    assert total_steps(job, samples) == steps


def test_too_little_data_for_one_step_is_a_clear_error() -> None:
    job = offline_job("sft", Path("/m"), "d.jsonl", steps=None, lr=1e-3)
    with pytest.raises(
        OfflineJobError, match=r"training.trainBatchSize \(8\) is larger than the data"
    ):
        total_steps(job, 5)


def test_overrides_apply_and_revalidate() -> None:
    job = offline_job("sft", Path("/m"), "d.jsonl", steps=3, lr=1e-3)
    changed = job.with_overrides(resume="never", max_steps=9)
    assert (changed.checkpoint.resume, changed.training.max_steps) == (ResumePolicy.NEVER, 9)
    assert job.with_overrides(resume=None, max_steps=None) == job


@pytest.mark.parametrize(
    ("algorithm", "extra", "message"),
    [
        ("ipo", {"labelSmoothing": 0.2}, "algorithm.labelSmoothing: label noise applies"),
        ("ppo", {}, "algorithm.name: ppo is an online algorithm"),
    ],
    ids=["ipo-with-label-noise", "online-algorithm"],
)
def test_jobs_the_offline_trainers_refuse_exit_1_with_the_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tiny_model_dir: Path,
    algorithm: str,
    extra: dict[str, float],
    message: str,
) -> None:
    doc = offline_job("sft", tiny_model_dir, "d.jsonl", steps=1, lr=1e-3).model_dump()
    doc["algorithm"] = {"name": algorithm, **extra}
    if algorithm == "ppo":
        doc["models"]["reward_function"] = {"builtin": "repeat-letter"}
    job = JobConfig.model_validate(doc)
    code = run_offline(
        job, name="bad", base_dir=tmp_path, run_dir=tmp_path / "run", resume=None, max_steps=None
    )
    assert code == 1
    assert message in capsys.readouterr().err


def test_missing_data_file_exits_1_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_model_dir: Path
) -> None:
    job = offline_job("sft", tiny_model_dir, "missing.jsonl", steps=1, lr=1e-3)
    code = run_offline(
        job, name="bad", base_dir=tmp_path, run_dir=tmp_path / "run", resume=None, max_steps=None
    )
    assert code == 1
    assert "missing.jsonl" in capsys.readouterr().err


def test_data_smaller_than_a_batch_exits_1_before_any_cluster_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_model_dir: Path
) -> None:
    write_jsonl(tmp_path / "d.jsonl", sft_rows(3))
    job = offline_job("sft", tiny_model_dir, "d.jsonl", steps=None, lr=1e-3)
    code = run_offline(
        job, name="small", base_dir=tmp_path, run_dir=tmp_path / "run", resume=None, max_steps=None
    )
    assert code == 1
    assert "trainBatchSize" in capsys.readouterr().err


def test_publish_dir_replaces_the_old_export_and_never_leaves_half_a_one(tmp_path: Path) -> None:
    final = tmp_path / "final"

    def write(version: str) -> object:
        return lambda d: (d / "weights").write_text(version)

    publish_dir(write("1"), final)
    publish_dir(write("2"), final)
    assert (final / "weights").read_text() == "2"

    def fail(d: Path) -> None:
        (d / "weights").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        publish_dir(fail, final)
    assert (final / "weights").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]
