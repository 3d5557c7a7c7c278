"""The reporter fan-out, local sinks and step timing."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from rlhf_trainer.config import LoggingConfig
from rlhf_trainer.reporting.base import StepReport
from rlhf_trainer.reporting.reporter import Reporter, build_reporter
from rlhf_trainer.reporting.sinks import console_line
from rlhf_trainer.reporting.timing import Progress, StageTimer, format_duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_stage_timer_breakdown() -> None:
    clock = FakeClock()
    timer = StageTimer(clock)
    with timer("generation"):
        clock.now += 3.0
    with timer("make_experience"):
        clock.now += 1.0
    with timer("generation"):  # a stage run twice adds up
        clock.now += 1.0
    with timer("checkpoint"):
        clock.now += 0.5
    clock.now += 0.25  # untimed work still counts in the total
    assert timer.timings() == {
        "generation": 4.0,
        "weight_sync": 0.0,
        "make_experience": 1.0,
        "training": 0.0,
        "checkpoint": 0.5,
        "total": 5.75,
    }
    timer.reset()
    assert timer.timings()["total"] == 0.0 and timer.timings()["generation"] == 0.0
    with pytest.raises(ValueError, match="'total' is the whole step"), timer("total"):
        pass


def test_progress_eta_uses_recent_step_times() -> None:
    progress = Progress(window=2)
    assert progress.eta_seconds(0, 10) is None
    for seconds in (10.0, 2.0, 4.0):
        progress.step_done(seconds)
    assert progress.eta_seconds(7, 10) == 9.0  # mean of the last two (3 s) x 3 steps left


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "?"), (42.4, "42s"), (185, "3m05s"), (3720, "1h02m")],
    ids=["unknown", "seconds", "minutes", "hours"],
)
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


def test_console_line() -> None:
    report = StepReport(12, 100, {"reward": 0.5312, "kl": 0.00123}, {"total": 1.7}, 64, 37.65, 150)
    assert console_line(report) == (
        "step 12/100 (12%) | reward 0.5312 | kl 0.00123 | 37.6 samples/s | 1.70 s/step | ETA 2m30s"
    )


def test_build_reporter_writes_console_jsonl_and_tensorboard(tmp_path: Path) -> None:
    out = io.StringIO()
    cfg = LoggingConfig(log_every_steps=2)
    with build_reporter(cfg, tmp_path, console=out, env={}) as reporter:
        for n in (1, 2, 3):
            reporter.on_step(
                n,
                3,
                {"reward": 0.1 * n, "kl": 0.01, "bad": float("nan")},
                {"generation": 0.5, "total": 1.0},
                samples=16,
            )
        reporter.on_checkpoint(3, tmp_path / "ckpt" / "step-000003")
    lines = out.getvalue().splitlines()
    assert [line.split(" |")[0] for line in lines[:2]] == ["step 2/3 (67%)", "step 3/3 (100%)"]
    assert lines[2].startswith("checkpoint step 3:")
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records] == ["step", "step", "step", "checkpoint"]
    assert records[0]["metrics"] == {"reward": 0.1, "kl": 0.01}  # NaN dropped
    assert records[0]["samples_per_second"] == 16.0
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_tensorboard_scalars_are_readable(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with build_reporter(LoggingConfig(), tmp_path, console=io.StringIO(), env={}) as reporter:
        for n in (1, 2):
            reporter.on_step(n, 2, {"reward": float(n)}, {"training": 0.3, "total": 1.0}, 4)
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [e.value for e in acc.Scalars("metrics/reward")] == [1.0, 2.0]
    assert [round(e.value, 3) for e in acc.Scalars("time/training")] == [0.3, 0.3]


def test_examples_from_the_driver_are_logged(tmp_path: Path) -> None:
    examples = [{"prompt": "p", "response": "r", "label": "a"}]
    with build_reporter(
        LoggingConfig(tensorboard=False), tmp_path, console=io.StringIO(), env={}
    ) as reporter:
        report = reporter.on_step(1, 1, {"samples_per_s": 12.0}, {"total": 2.0}, examples)
    assert report.samples_per_second == 12.0 and report.examples == examples
    record = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert record["examples"] == examples


def test_wandb_missing_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    cfg = LoggingConfig.model_validate({"wandb": {"project": "p", "mode": "offline"}})
    with pytest.raises(RuntimeError, match="wandb package is not installed"):
        build_reporter(cfg, tmp_path, console=io.StringIO(), env={})


def test_a_failing_sink_does_not_stop_the_others(tmp_path: Path) -> None:
    class Broken:
        def write_step(self, report: StepReport) -> None:
            raise OSError("disk full")

        def write_checkpoint(self, step: int, path: Path) -> None:
            raise OSError("disk full")

        def close(self) -> None:
            raise OSError("disk full")

    seen: list[Any] = []

    class Recorder:
        def write_step(self, report: StepReport) -> None:
            seen.append(report.step)

        def write_checkpoint(self, step: int, path: Path) -> None:
            seen.append(path)

        def close(self) -> None:
            seen.append("closed")

    reporter = Reporter([Broken(), Recorder()])
    reporter.on_step(1, 2, {}, {"total": 1.0})
    reporter.on_checkpoint(1, tmp_path)
    reporter.close()
    assert seen == [1, tmp_path, "closed"]
