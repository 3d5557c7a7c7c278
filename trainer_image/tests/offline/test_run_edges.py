"""The offline path through the runner, edges that need no cluster: overrides, clear errors
that exit `ExitCode.INVALID` before any rank starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlhf_trainer.config import ResumePolicy
from rlhf_trainer.config.outcome import ExitCode
from rlhf_trainer.runner.main import run_config

from .jobs import offline_job
from .synthetic import sft_rows, write_jsonl


def test_overrides_apply_and_revalidate() -> None:
    job = offline_job("sft", Path("/m"), "d.jsonl", steps=3, lr=1e-3)
    changed = job.with_overrides(resume="never", max_steps=9)
    assert (changed.checkpoint.resume, changed.training.max_steps) == (ResumePolicy.NEVER, 9)
    assert job.with_overrides(resume=None, max_steps=None) == job


def test_missing_data_file_exits_78_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_model_dir: Path
) -> None:
    job = offline_job("sft", tiny_model_dir, "missing.jsonl", steps=1, lr=1e-3)
    code = run_config(job, name="bad", base_dir=tmp_path, run_dir=tmp_path / "run")
    assert code == ExitCode.INVALID
    assert "missing.jsonl" in capsys.readouterr().err


def test_data_smaller_than_a_batch_exits_78_before_any_cluster_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_model_dir: Path
) -> None:
    write_jsonl(tmp_path / "d.jsonl", sft_rows(3))
    job = offline_job("sft", tiny_model_dir, "d.jsonl", steps=None, lr=1e-3)
    code = run_config(job, name="small", base_dir=tmp_path, run_dir=tmp_path / "run")
    assert code == ExitCode.INVALID
    assert "training.trainBatchSize: 8 is larger than the data (3 samples" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists()


def test_an_override_the_rules_refuse_exits_78(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = offline_job("sft", Path("/m"), "d.jsonl", steps=3, lr=1e-3)
    code = run_config(job, name="x", base_dir=tmp_path, run_dir=tmp_path / "run", max_steps=0)
    assert code == ExitCode.INVALID
    assert "--resume/--max-steps:" in capsys.readouterr().err
