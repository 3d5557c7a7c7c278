"""The offline loop, shared by every trainer kind: batch -> frozen model's outputs (reference
log-probs, or a distillation teacher's distributions) -> one update -> checkpoint -> report; at
the end a final checkpoint and the HF export.

A step reads the next `trainBatchSize` samples of the data stream (epochs repeat it, each pass
reshuffled with the seed) and takes exactly one optimiser step on them. The frozen model's
outputs for step k+1 are requested before step k's update is awaited, so on separate devices
the reference (or teacher) costs no step time. What a checkpoint needs of the driver is the
step and the stream position (`TrainerState.data_position`); the ranks save weights,
optimizer, scheduler and their RNG.

Fit, resume, checkpoints (periodic, final, after a failure) and stop checks are the one step
loop's (`rlhf_trainer.context.steploop`); this module plugs in the offline stages. A stop
request (SIGTERM) is honoured between steps and before a step's update: the step's batch (and
the next one's frozen outputs, already on their way) are dropped, and `Preempted` takes the
failure path, which checkpoints the last finished step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from rlhf_trainer.checkpoint import (
    TrainerState,
    load_rng_state,
    load_trainer_state,
    save_rng_state,
    save_trainer_state,
)
from rlhf_trainer.config import JobConfig
from rlhf_trainer.context.health import HealthWatch
from rlhf_trainer.context.preemption import StopCheck, never
from rlhf_trainer.context.protocols import CheckpointStore, Cluster, Pending, Reporter
from rlhf_trainer.context.steploop import IDLE, UPDATE, StepLoop
from rlhf_trainer.objectives.batch import Batch
from rlhf_trainer.objectives.collate import response_tokens
from rlhf_trainer.reporting.timing import StageTimer

Collate = Callable[[Sequence[Any]], Batch]


class OfflineCluster(Cluster, Protocol):
    """What the loop needs of `distributed.offline.OfflineCluster`."""

    def frozen_outputs(self, batch: Batch) -> Pending[Batch] | None: ...
    def train(self, batch: Batch, step: int) -> Pending[dict[str, float]]: ...
    def export_hf(self, directory: str, tokenizer_dir: str) -> None: ...


class Dataset(Protocol):
    def __len__(self) -> int: ...
    def batches(
        self, batch_size: int, start: int = 0, *, passes: int | None = 1
    ) -> Iterator[Any]: ...


@dataclass
class Prepared:
    """A step batch as tensors, with its frozen model's outputs (reference log-probs, teacher
    distributions) on the way."""

    tensors: Batch
    position: int
    samples: int
    frozen: Pending[Batch] | None


class OfflineTrainer(StepLoop[OfflineCluster]):
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
        super().__init__(
            cfg,
            cluster,
            checkpoints,
            reporter,
            total_steps=total_steps,
            export_dir=export_dir,
            stop=stop,
            health=HealthWatch.offline(cfg.run_policy.guardrails),
        )
        self.dataset, self.collate, self.tokenizer_dir = dataset, collate, tokenizer_dir
        # The step batches from the data position on, and the next step's, prepared ahead.
        self.stream: Iterator[Any] = iter(())
        self.upcoming: Prepared | None = None

    def begin(self) -> None:
        self.stream = self.dataset.batches(
            self.cfg.training.train_batch_size, start=self.state.data_position, passes=None
        )
        if self.state.step < self.total_steps:
            self.upcoming = self.prepare(next(self.stream))

    def prepare(self, batch: Any) -> Prepared:
        tensors = self.collate(batch.items)
        return Prepared(
            tensors, batch.position, len(batch.items), self.cluster.frozen_outputs(tensors)
        )

    def train_step(self, state: TrainerState) -> TrainerState:
        step = state.step + 1
        timer = StageTimer()
        current = self.upcoming
        if current is None:  # begin() prepared it, and every step prepares the next
            raise RuntimeError(f"step {step}: no batch was prepared")
        tensors = dict(current.tensors)
        if current.frozen is not None:
            with timer("make_experience"):  # the paper's "log-probs" stage
                tensors.update(current.frozen.result())
        self.stop_if_requested()  # the last point where the step leaves no trace
        self.phase = UPDATE
        with timer("training"):
            update = self.cluster.train(tensors, step)
            # The next step's frozen-model passes run while this step trains.
            self.upcoming = self.prepare(next(self.stream)) if step < self.total_steps else None
            metrics: dict[str, float] = update.result()
        new_state = replace(
            state,
            step=step,
            data_position=current.position,
            samples_seen=state.samples_seen + current.samples,
            metrics={k: float(v) for k, v in metrics.items()},
        )
        self.state, self.phase = new_state, "updated"
        if self.due(step):
            with timer("checkpoint"):
                self.checkpoint(new_state, metrics=metrics)
        self.report(step, current, metrics, timer.timings())
        self.phase = IDLE
        self.check_health(step, metrics)
        return new_state

    def report(
        self, step: int, batch: Prepared, metrics: dict[str, float], timings: dict[str, float]
    ) -> None:
        total = timings["total"]
        shown = dict(metrics)
        shown["epoch"] = batch.position / len(self.dataset)
        shown["samples_per_s"] = batch.samples / total if total else 0.0
        shown["tokens_per_s"] = response_tokens(batch.tensors) / total if total else 0.0
        self.reporter.on_step(step, self.total_steps, shown, timings, batch.samples)

    # --- what a checkpoint keeps, resume, export -----------------------------------------
    def save_driver_state(
        self, directory: Path, state: TrainerState, *, after_failure: bool
    ) -> None:
        save_trainer_state(directory, state)
        save_rng_state(directory)

    def load_driver_state(self, directory: Path) -> TrainerState:
        state = load_trainer_state(directory)
        load_rng_state(directory)
        return state

    def export(self, directory: Path) -> None:
        self.cluster.export_hf(str(directory), self.tokenizer_dir)
