"""`Reporter`: the driver's one reporting object, fanning each step out to every sink."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rlhf_trainer.config import LoggingConfig
from rlhf_trainer.config.history import MetricsHistory

from .base import Sink, StepReport, finite_metrics, split_samples
from .kube import KubeReporter, target_from_env
from .sinks import ConsoleSink, JsonlSink, TensorBoardSink, WandbSink
from .timing import Progress

if TYPE_CHECKING:
    from rlhf_trainer.checkpoint_best import BestCheckpoint

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


class Reporter:
    """`on_step` / `on_checkpoint` / `close` for the driver; a failing sink is logged and
    skipped (except at construction, where a misconfiguration should stop the run early)."""

    def __init__(self, sinks: Sequence[Sink], progress: Progress | None = None) -> None:
        self.sinks = list(sinks)
        self.progress = progress or Progress()

    def on_step(
        self,
        step: int,
        total_steps: int,
        metrics: Mapping[str, Any],
        timings: Mapping[str, float],
        samples: int | Sequence[Mapping[str, Any]] = 0,
    ) -> StepReport:
        """`samples`: how many samples the step trained on (for samples/s), or a few example
        dicts to log (then samples/s comes from `metrics["samples_per_s"]` when present)."""
        count, examples = split_samples(samples)
        clean = finite_metrics(metrics)
        step_seconds = self.progress.step_done(timings.get("total"))
        per_second = clean.get("samples_per_s")
        if per_second is None and count and step_seconds > 0:
            per_second = count / step_seconds
        report = StepReport(
            step=step,
            total_steps=total_steps,
            metrics=clean,
            timings=finite_metrics(timings),
            samples=count,
            samples_per_second=per_second,
            eta_seconds=self.progress.eta_seconds(step, total_steps),
            examples=examples,
        )
        for sink in self.sinks:
            self._guard(sink, "step", sink.write_step, report)
        return report

    def on_checkpoint(self, step: int, path: Path) -> None:
        for sink in self.sinks:
            self._guard(sink, "checkpoint", sink.write_checkpoint, step, Path(path))

    def on_best(self, best: BestCheckpoint) -> None:
        """A new best checkpoint (checkpoint.keepBest), to the sinks that show one (the
        metric itself is already among the step's metrics)."""
        for sink in self.sinks:
            write = getattr(sink, "write_best", None)
            if write is not None:
                self._guard(sink, "best", write, best)

    def close(self) -> None:
        for sink in self.sinks:
            self._guard(sink, "close", sink.close)

    @staticmethod
    def _guard(sink: Sink, what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("reporting (%s) to %s failed; training continues", what, type(sink))

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(path: Path) -> MetricsHistory:
    """The bounded history of the step records in a metrics.jsonl (none: empty); a line that
    does not parse (a write cut short by a crash) is skipped."""
    history = MetricsHistory()
    if not path.is_file():
        return history
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("event") == "step":
                metrics = record.get("metrics")
                if isinstance(metrics, dict) and isinstance(record.get("step"), int):
                    history.add(record["step"], finite_metrics(metrics))
    return history


def build_reporter(
    cfg: LoggingConfig,
    run_dir: Path,
    *,
    config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    console: TextIO | None = None,
) -> Reporter:
    """Console + `<run_dir>/metrics.jsonl`, TensorBoard and W&B as configured, and the
    RLHFJob status when the environment says this run is one."""
    sinks: list[Sink] = [
        ConsoleSink(console, every=cfg.log_every_steps),
        JsonlSink(run_dir / METRICS_FILE),
    ]
    if cfg.tensorboard:
        sinks.append(TensorBoardSink(run_dir / TENSORBOARD_DIR))
    if cfg.wandb is not None:
        sinks.append(WandbSink(cfg.wandb, run_dir, dict(config or {})))
    target = target_from_env(env)
    if target is not None:
        # Read before this attempt appends: an earlier attempt's steps keep their curves.
        sinks.append(KubeReporter(target, history=read_history(run_dir / METRICS_FILE)))
    return Reporter(sinks)
