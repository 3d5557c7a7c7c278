"""Checkpoints belong to their job: a re-created job (same name and storage, new UID) does not
resume its predecessor, unless `checkpoint.resumeFrom` names a checkpoint; a changed config
fingerprint is refused naming what changed; rotation goes by publish order."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor

from rlhf_trainer.checkpoint import (
    JOB_UID_ENV,
    CheckpointManager,
    CheckpointOwner,
    CheckpointRefused,
    resume_fingerprint,
)
from rlhf_trainer.config import JobConfig, ResumePolicy
from rlhf_trainer.context.job import RunContext, RunDirs
from rlhf_trainer.offline.driver import OfflineTrainer
from rlhf_trainer.runner.outcome import FailureClass, classify

AUTO, NEVER = ResumePolicy.AUTO, ResumePolicy.NEVER


def job(**changes: Any) -> JobConfig:
    doc: dict[str, Any] = {
        "algorithm": {"name": "sft"},
        "models": {"actor": {"pretrained": "/models/base"}},
        "data": {"train": [{"path": "d.jsonl"}]},
        "training": {"trainBatchSize": 4, "microTrainBatchSize": 2, "maxSteps": 4},
    }
    for section, values in changes.items():
        doc[section] = {**doc.get(section, {}), **values}
    return JobConfig.model_validate(doc)


FP = resume_fingerprint(job())


def manager(root: Path, uid: str | None, keep: int = 5, fp: dict[str, Any] = FP) -> Any:
    return CheckpointManager(root, keep, CheckpointOwner(uid, fp))


def writes(text: str) -> Callable[[Path], None]:
    return lambda d: (d / "weights").write_text(text)


def saved(root: Path, uid: str | None, steps: list[int]) -> None:
    m = manager(root, uid)
    for step in steps:
        m.save(step, writes(f"{uid}:{step}"))


@pytest.mark.parametrize(
    ("writer", "reader", "resumes"),
    [
        pytest.param("uid-a", "uid-a", True, id="same-job-retried"),
        pytest.param("uid-a", "uid-b", False, id="re-created-job"),
        pytest.param(None, None, True, id="local-run-again"),
        pytest.param("uid-a", None, False, id="cluster-checkpoint-run-locally"),
        pytest.param(None, "uid-b", False, id="local-checkpoint-on-a-cluster"),
    ],
)
def test_only_the_jobs_own_checkpoints_are_resumed(
    tmp_path: Path, writer: str | None, reader: str | None, resumes: bool
) -> None:
    saved(tmp_path, writer, [1, 2])
    point = manager(tmp_path, reader).resume_point(AUTO, None)
    assert (point.step if point else None) == (2 if resumes else None)


def test_a_recreated_job_sets_its_predecessors_checkpoints_aside_untouched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    saved(tmp_path, "uid-a", [1, 2])
    successor = manager(tmp_path, "uid-b", keep=1)
    with caplog.at_level(logging.WARNING):
        assert successor.resume_point(AUTO, None) is None
    assert "written by another job (uid-a)" in caplog.text
    assert "checkpoint.resumeFrom: previous-uid-a/step-000002" in caplog.text
    # It writes the same step names, keeps one, and neither overwrites nor rotates theirs.
    for step in (1, 2, 3):
        successor.save(step, writes(f"b:{step}"))
    assert [r.step for r in successor.checkpoints()] == [3]
    previous = tmp_path / "previous-uid-a"
    assert sorted(p.name for p in previous.iterdir()) == ["step-000001", "step-000002"]
    assert (previous / "step-000002" / "weights").read_text() == "uid-a:2"


@pytest.mark.parametrize(
    ("resume_from", "step"),
    [
        pytest.param("latest", 2, id="latest"),
        pytest.param("step-000001", 1, id="relative-path"),
        pytest.param("ABSOLUTE", 1, id="absolute-path"),
    ],
)
def test_resume_from_names_another_jobs_checkpoint(
    tmp_path: Path, resume_from: str, step: int
) -> None:
    saved(tmp_path, "uid-a", [1, 2])
    if resume_from == "ABSOLUTE":
        resume_from = str(tmp_path / "step-000001")
    point = manager(tmp_path, "uid-b").resume_point(AUTO, resume_from)
    assert point is not None and point.step == step


def test_resume_from_a_set_aside_checkpoint(tmp_path: Path) -> None:
    saved(tmp_path, "uid-a", [1, 2])
    assert manager(tmp_path, "uid-b").resume_point(AUTO, None) is None  # sets them aside
    point = manager(tmp_path, "uid-b").resume_point(AUTO, "previous-uid-a/step-000002")
    assert point is not None and point.step == 2


def test_resume_from_a_missing_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointRefused, match=r"resumeFrom: 'step-000009'.*not a complete") as e:
        manager(tmp_path, "uid-b").resume_point(AUTO, "step-000009")
    assert classify(e.value) is FailureClass.INVALID_SPEC


def test_resume_never_starts_fresh_and_still_protects_another_jobs_checkpoints(
    tmp_path: Path,
) -> None:
    saved(tmp_path, "uid-a", [1])
    saved(tmp_path, "uid-b", [5])
    assert manager(tmp_path, "uid-b").resume_point(NEVER, None) is None
    assert (tmp_path / "previous-uid-a" / "step-000001").is_dir()
    assert (tmp_path / "step-000005").is_dir()  # its own stay, rotated as new ones come


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            {"models": {"actor": {"pretrained": "/models/other"}}},
            'models.actor: {"pretrained": "/models/base", "trustRemoteCode": false} -> '
            '{"pretrained": "/models/other", "trustRemoteCode": false}',
            id="actor",
        ),
        pytest.param({"placement": {"actorGpus": 2}}, "placement.actorGpus: 1 -> 2", id="ranks"),
        pytest.param({"training": {"zeroStage": 3}}, "training.zeroStage: 2 -> 3", id="zero"),
        pytest.param({"algorithm": {"name": "dpo"}}, 'algorithm.name: "sft" -> "dpo"', id="algo"),
        pytest.param({"data": {"train": [{"path": "other.jsonl"}]}}, "data.train: [{", id="data"),
    ],
)
def test_a_changed_fingerprint_is_refused_naming_what_changed(
    tmp_path: Path, change: dict[str, Any], expected: str
) -> None:
    saved(tmp_path, "uid-a", [1])
    changed = resume_fingerprint(job(**change))
    with pytest.raises(CheckpointRefused, match="written for another config") as refused:
        manager(tmp_path, "uid-a", fp=changed).resume_point(AUTO, None)
    assert expected in str(refused.value)


def test_what_a_resumed_run_may_change_is_not_in_the_fingerprint() -> None:
    tuned = job(training={"maxSteps": 40, "actorLearningRate": 1e-7}, checkpoint={"keep": 1})
    assert resume_fingerprint(tuned) == FP


def test_rotation_by_publish_order_keeps_what_a_resumed_run_writes(tmp_path: Path) -> None:
    m = manager(tmp_path, None, keep=2)
    for step in (10, 20, 30):
        m.save(step, writes(str(step)))
    assert [r.step for r in m.checkpoints()] == [20, 30]
    # Resumed from step 20 (say 30 turned out bad): the steps it writes are lower than 30.
    point = m.resume_point(AUTO, "step-000020")
    assert point is not None and point.step == 20
    m.save(21, writes("21"))
    assert [r.step for r in m.checkpoints()] == [30, 21]  # by step, 21 would be gone
    m.save(22, writes("22"))
    assert [r.step for r in m.checkpoints()] == [21, 22]
    latest = m.latest()
    assert latest is not None and latest.step == 22


# --- through the offline loop, with the UID from the environment ---------------------------


class Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


class Cluster:
    def __init__(self) -> None:
        self.updates: list[int] = []
        self.loaded: list[str] = []

    def frozen_outputs(self, batch: dict[str, Tensor]) -> None:
        return None

    def train(self, batch: dict[str, Tensor], step: int) -> Done:
        self.updates.append(step)
        return Done({"loss": 1.0})

    def save_checkpoint(self, directory: str) -> None:
        (Path(directory) / "weights").write_text(str(self.updates[-1:]))

    def load_checkpoint(self, directory: str) -> None:
        self.loaded.append(directory)

    def export_hf(self, directory: str, tokenizer_dir: str) -> None:
        pass

    def weights_finite(self) -> bool:
        return True


class Samples:
    def __len__(self) -> int:
        return 100

    def batches(self, size: int, start: int = 0, *, passes: int | None = 1) -> Iterator[Any]:
        while True:
            start += size
            yield SimpleNamespace(items=list(range(start - size, start)), position=start)


class Recorder:
    def on_step(self, *args: Any) -> None: ...
    def on_checkpoint(self, step: int, path: Path) -> None: ...


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uid: str, **cfg: Any) -> Any:
    monkeypatch.setenv(JOB_UID_ENV, uid)
    ctx = RunContext(job(**cfg), "same-name", tmp_path, RunDirs(tmp_path, tmp_path / "ckpt"))
    cluster = Cluster()
    trainer = OfflineTrainer(
        ctx.cfg,
        cluster,
        Samples(),
        lambda items: {"loss_mask": torch.ones(len(items), 3)},
        checkpoints=ctx.checkpoints(),
        reporter=Recorder(),
        total_steps=ctx.cfg.training.max_steps or 0,
        export_dir=None,
        tokenizer_dir="/m",
    )
    trainer.fit()
    return trainer, cluster


def test_a_recreated_job_trains_from_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _ = run(tmp_path, monkeypatch, "uid-a", training={"maxSteps": 2})
    assert first.resumed_from is None
    # The same job retried (same UID) continues; a job created anew under the same name does not.
    retried, cluster = run(tmp_path, monkeypatch, "uid-a", training={"maxSteps": 3})
    assert retried.resumed_from == 2 and cluster.updates == [3]
    recreated, cluster = run(tmp_path, monkeypatch, "uid-b", training={"maxSteps": 3})
    assert recreated.resumed_from is None and cluster.updates == [1, 2, 3]
    assert cluster.loaded == []
    adopted, cluster = run(
        tmp_path,
        monkeypatch,
        "uid-c",
        training={"maxSteps": 5},
        checkpoint={"resumeFrom": "latest"},
    )
    assert adopted.resumed_from == 3 and cluster.updates == [4, 5]


def test_resume_never_on_the_command_line_outranks_resume_from() -> None:
    cfg = job(checkpoint={"resumeFrom": "latest"}).with_overrides(resume="never", max_steps=None)
    assert cfg.checkpoint.resume is NEVER and cfg.checkpoint.resume_from is None
