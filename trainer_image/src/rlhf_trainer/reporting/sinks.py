"""Local sinks: console progress, a JSONL metrics file, TensorBoard, Weights & Biases."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rlhf_trainer.config import WandbConfig
from rlhf_trainer.config.report import EVAL_GREEDY_REWARD, EVAL_MEAN_REWARD

from .base import KL_KEY, REWARD_KEY, StepReport
from .timing import STAGES, format_duration

if TYPE_CHECKING:
    from rlhf_trainer.checkpoint_best import BestCheckpoint


def console_line(report: StepReport) -> str:
    """`step 12/100 (12%) | reward 0.531 | kl 0.0012 | 38.2 samples/s | 1.7 s/step | ETA 2m30s`."""
    pct = 100.0 * report.step / report.total_steps if report.total_steps else 0.0
    parts = [f"step {report.step}/{report.total_steps} ({pct:.0f}%)"]
    for key in (REWARD_KEY, KL_KEY, EVAL_GREEDY_REWARD, EVAL_MEAN_REWARD):
        if key in report.metrics:
            parts.append(f"{key} {report.metrics[key]:.4g}")
    if report.samples_per_second is not None:
        parts.append(f"{report.samples_per_second:.1f} samples/s")
    if "total" in report.timings:
        parts.append(f"{report.timings['total']:.2f} s/step")
    parts.append(f"ETA {format_duration(report.eta_seconds)}")
    return " | ".join(parts)


class ConsoleSink:
    """A progress bar (tqdm) on a terminal; one line per step elsewhere (logs, pods)."""

    def __init__(self, stream: TextIO | None = None, every: int = 1) -> None:
        self.stream = stream or sys.stderr
        self.every = every
        self._bar: Any = None
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def write_step(self, report: StepReport) -> None:
        if self._tty:
            self._update_bar(report)
        elif report.step % self.every == 0 or report.is_final:
            print(console_line(report), file=self.stream, flush=True)

    def _update_bar(self, report: StepReport) -> None:
        from tqdm import tqdm

        if self._bar is None:
            self._bar = tqdm(
                total=report.total_steps, initial=report.step - 1, file=self.stream, unit="step"
            )
        self._bar.update(report.step - self._bar.n)
        self._bar.set_postfix_str(console_line(report).split(" | ", 1)[-1], refresh=True)

    def write_checkpoint(self, step: int, path: Path) -> None:
        self._say(f"checkpoint step {step}: {path}")

    def write_best(self, best: BestCheckpoint) -> None:
        self._say(f"best checkpoint: step {best.step} ({best.metric} = {best.score:.4g})")

    def _say(self, message: str) -> None:
        if self._bar is not None:
            self._bar.write(message)
        else:
            print(message, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class JsonlSink:
    """One JSON object per step (and per checkpoint) appended to a file; survives restarts."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def write_step(self, report: StepReport) -> None:
        record: dict[str, Any] = {
            "event": "step",
            "time": time.time(),
            "step": report.step,
            "total_steps": report.total_steps,
            "metrics": report.metrics,
            "timings": report.timings,
            "samples": report.samples,
            "samples_per_second": report.samples_per_second,
            "eta_seconds": report.eta_seconds,
        }
        if report.examples:
            record["examples"] = report.examples
        self._write(record)

    def write_checkpoint(self, step: int, path: Path) -> None:
        self._write({"event": "checkpoint", "time": time.time(), "step": step, "path": str(path)})

    def write_best(self, best: BestCheckpoint) -> None:
        record = {"event": "best", "time": time.time(), "step": best.step, "path": str(best.path)}
        self._write(record | {"metric": best.metric, "score": best.score})

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    """Scalars `metrics/<name>` and `time/<stage>`, and example texts, for TensorBoard."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def write_step(self, report: StepReport) -> None:
        for name, value in report.metrics.items():
            self.writer.add_scalar(f"metrics/{name}", value, report.step)
        for stage, seconds in report.timings.items():
            self.writer.add_scalar(f"time/{stage}", seconds, report.step)
        if report.samples_per_second is not None:
            self.writer.add_scalar(
                "perf/samples_per_second", report.samples_per_second, report.step
            )
        if report.examples:
            text = "\n\n".join(f"```\n{json.dumps(e, indent=1)}\n```" for e in report.examples)
            self.writer.add_text("examples", text, report.step)
        self.writer.flush()

    def write_checkpoint(self, step: int, path: Path) -> None:
        self.writer.add_text("checkpoints", str(path), step)

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """Weights & Biases; `mode: offline` writes a local run that `wandb sync` uploads later."""

    def __init__(self, cfg: WandbConfig, run_dir: Path, config: dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError as err:
            raise RuntimeError(
                "logging.wandb is set but the wandb package is not installed in this image: "
                "pip install wandb, or remove logging.wandb"
            ) from err
        self._wandb = wandb
        self.run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            name=cfg.run_name,
            mode=cfg.mode.value,
            dir=str(run_dir),
            config=config,
        )

    def write_step(self, report: StepReport) -> None:
        data: dict[str, Any] = {f"metrics/{k}": v for k, v in report.metrics.items()}
        data |= {f"time/{k}": v for k, v in report.timings.items() if k in (*STAGES, "total")}
        if report.samples_per_second is not None:
            data["perf/samples_per_second"] = report.samples_per_second
        self.run.log(data, step=report.step)

    def write_checkpoint(self, step: int, path: Path) -> None:
        self.run.log({"checkpoint_step": step}, step=step)

    def close(self) -> None:
        self.run.finish()
        # wandb 0.31's finish returns before its core process has written the run's file
        # (offline: `wandb/offline-run-*/run-*.wandb`); teardown waits for it.
        self._wandb.teardown()
