"""The offline loop, shared by every trainer kind: batch -> frozen model's outputs (reference
log-probs, or a distillation teacher's distributions) -> one update -> checkpoint -> report; at
the end a final checkpoint and the HF export.

A step reads the next `trainBatchSize` samples of the data stream (epochs repeat it, each pass
reshuffled with the seed) and takes exactly one optimiser step on them. The frozen model's
outputs for step k+1 are requested before step k's update is awaited, so on separate devices
the reference (or teacher) costs no step time. What a checkpoint needs of the driver is the
step and the stream position (`TrainerState.data_position`); the ranks save weights,
optimizer, scheduler and their RNG.

A stop request (SIGTERM, see `rlhf_trainer.context.preemption`) is honoured before a step's
update: the step's batch (and the next one's frozen outputs, already on their way) are
dropped, and `Preempted` takes the failure path, which checkpoints the last finished step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from torch import Tensor

from rlhf_trainer.checkpoint import (
    CheckpointRef,
    TrainerState,
    load_rng_state,
    load_trainer_state,
    publish_dir,
    save_rng_state,
    save_trainer_state,
)
from rlhf_trainer.config import JobConfig, ResumePolicy
from rlhf_trainer.context.health import HealthWatch, Unhealthy
from rlhf_trainer.context.preemption import Preempted, StopCheck, never
from rlhf_trainer.objectives.collate import response_tokens
from rlhf_trainer.reporting.timing import StageTimer

Collate = Callable[[Sequence[Any]], dict[str, Tensor]]


class Pending(Protocol):
    def result(self) -> Any: ...


class OfflineCluster(Protocol):
    """What the loop needs of `distributed.offline.OfflineCluster`."""

    def frozen_outputs(self, batch: dict[str, Tensor]) -> Pending | None: ...
    def train(self, batch: dict[str, Tensor], step: int) -> Pending: ...
    def save_checkpoint(self, directory: str) -> None: ...
    def load_checkpoint(self, directory: str) -> None: ...
    def export_hf(self, directory: str, tokenizer_dir: str) -> None: ...
    def weights_finite(self) -> bool: ...


class CheckpointStore(Protocol):
    def save(self, step: int, write_fn: Callable[[Path], None]) -> Path: ...
    def latest(self) -> CheckpointRef | None: ...
    def resume_point(
        self, resume: ResumePolicy, resume_from: str | None
    ) -> CheckpointRef | None: ...


class Reporter(Protocol):
    def on_step(
        self,
        step: int,
        total_steps: int,
        metrics: dict[str, float],
        timings: dict[str, float],
        samples: int,
    ) -> Any: ...
    def on_checkpoint(self, step: int, path: Path) -> None: ...


class Dataset(Protocol):
    def __len__(self) -> int: ...
    def batches(
        self, batch_size: int, start: int = 0, *, passes: int | None = 1
    ) -> Iterator[Any]: ...


@dataclass
class Prepared:
    """A step batch as tensors, with its frozen model's outputs (reference log-probs, teacher
    distributions) on the way."""

    tensors: dict[str, Tensor]
    position: int
    samples: int
    frozen: Pending | None


class OfflineTrainer:
    def __init__(
        self,
        cfg: JobConfig,
        cluster: OfflineCluster,
        dataset: Dataset,
        collate: Collate,
        *,
        checkpoints: CheckpointStore,
        reporter: Reporter,
        total_steps: int,
        export_dir: Path | None,
        tokenizer_dir: str,
        stop: StopCheck = never,
    ) -> None:
        self.cfg, self.cluster, self.dataset, self.collate = cfg, cluster, dataset, collate
        self.checkpoints, self.reporter = checkpoints, reporter
        self.total_steps = total_steps
        self.export_dir, self.tokenizer_dir = export_dir, tokenizer_dir
        self.stop = stop
        self.state = TrainerState()
        self.saved_step = -1
        self.resumed_from: int | None = None
        # "training" while an update may be half applied on the ranks (no checkpoint then).
        self.phase = "idle"
        self.failure_checkpoint: Path | None = None
        self.health = HealthWatch.offline(cfg.run_policy.guardrails)

    # --- the loop -------------------------------------------------------------------------
    def fit(self) -> TrainerState:
        self.resume()
        try:
            stream = self.dataset.batches(
                self.cfg.training.train_batch_size, start=self.state.data_position, passes=None
            )
            upcoming = self.prepare(next(stream)) if self.state.step < self.total_steps else None
            while upcoming is not None:
                current = upcoming
                self.state, upcoming = self.train_step(self.state, current, stream)
            if self.saved_step != self.state.step:
                self.checkpoint(self.state)
            if self.export_dir is not None and self.cfg.checkpoint.export_hf:
                publish_dir(
                    lambda d: self.cluster.export_hf(str(d), self.tokenizer_dir), self.export_dir
                )
        except BaseException:
            self.checkpoint_after_failure()
            raise
        return self.state

    def prepare(self, batch: Any) -> Prepared:
        tensors = self.collate(batch.items)
        return Prepared(
            tensors, batch.position, len(batch.items), self.cluster.frozen_outputs(tensors)
        )

    def train_step(
        self, state: TrainerState, current: Prepared, stream: Iterator[Any]
    ) -> tuple[TrainerState, Prepared | None]:
        step = state.step + 1
        timer = StageTimer()
        tensors = dict(current.tensors)
        if current.frozen is not None:
            with timer("make_experience"):  # the paper's "log-probs" stage
                tensors.update(current.frozen.result())
        if self.stop():  # the last point where the step leaves no trace
            raise Preempted(state.step)
        self.phase = "training"
        with timer("training"):
            update = self.cluster.train(tensors, step)
            # The next step's frozen-model passes run while this step trains.
            upcoming = self.prepare(next(stream)) if step < self.total_steps else None
            metrics: dict[str, float] = update.result()
        new_state = replace(
            state,
            step=step,
            data_position=current.position,
            samples_seen=state.samples_seen + current.samples,
            metrics={k: float(v) for k, v in metrics.items()},
        )
        self.state, self.phase = new_state, "updated"
        every = self.cfg.checkpoint.every_steps
        if (every and step % every == 0) or step == self.total_steps:
            with timer("checkpoint"):
                self.checkpoint(new_state)
        self.report(step, current, metrics, timer.timings())
        self.phase = "idle"
        trip = self.health.check(step, metrics)
        if trip is not None:  # `fit` checkpoints this step, then the run stops
            raise Unhealthy(trip)
        return new_state, upcoming

    def report(
        self, step: int, batch: Prepared, metrics: dict[str, float], timings: dict[str, float]
    ) -> None:
        total = timings["total"]
        shown = dict(metrics)
        shown["epoch"] = batch.position / len(self.dataset)
        shown["samples_per_s"] = batch.samples / total if total else 0.0
        shown["tokens_per_s"] = response_tokens(batch.tensors) / total if total else 0.0
        self.reporter.on_step(step, self.total_steps, shown, timings, batch.samples)

    # --- checkpoints ----------------------------------------------------------------------
    def checkpoint(self, state: TrainerState) -> Path:
        def write(directory: Path) -> None:
            self.cluster.save_checkpoint(str(directory))
            save_trainer_state(directory, state)
            save_rng_state(directory)

        path = self.checkpoints.save(state.step, write)
        self.saved_step = state.step
        self.reporter.on_checkpoint(state.step, path)
        return path

    def resume(self) -> None:
        """Continue from this job's checkpoint, if it has one (see `resume_point`)."""
        c = self.cfg.checkpoint
        latest = self.checkpoints.resume_point(c.resume, c.resume_from)
        if latest is None:
            return
        self.cluster.load_checkpoint(str(latest.path))
        self.state = load_trainer_state(latest.path)
        load_rng_state(latest.path)
        self.saved_step = self.resumed_from = self.state.step

    def checkpoint_after_failure(self) -> None:
        """Save the last completed step when a failure came outside an update (an update may
        be half applied on some ranks) and it is not saved yet."""
        if self.phase == "training" or self.state.step in (0, self.saved_step):
            return
        try:
            if self.cluster.weights_finite():
                self.failure_checkpoint = self.checkpoint(self.state)
        except Exception:  # the original error is the one to report
            self.failure_checkpoint = None
