"""The one step loop every trainer runs: resume -> steps (with stop checks) -> last checkpoint
-> export; on failure, a checkpoint of the last finished step when that is safe.

The online, iterative and offline drivers subclass `StepLoop` and plug in their stages:
`train_step` (one step, as named stages), `save_driver_state`/`load_driver_state` (what a
checkpoint keeps of the driver beside the ranks' files), `export`, and where they need them
`begin`, `start_fresh`, `models_consistent` and `close`. Everything about when to
checkpoint, resume, stop and give up lives here, once.

A failure leaves a final checkpoint only when the models are in one consistent state (the
failure came outside an update, or before the update changed any weights: see
`models_consistent`) and their weights are finite; a checkpoint is never half-written (see
`checkpoint_store`). A stop request (SIGTERM, see `preemption`) is honoured between steps; a
loop checks it within a step too (`stop_if_requested`), up to its update. The guardrails
(`health`) watch every step's metrics (`check_health`, at the end of a step) and the
non-finite values a stage finds (`NonFiniteError`): a trip raises `Unhealthy`, which takes the
failure path above.

With `checkpoint.keepBest` a checkpoint records its step's value of the metric (`checkpoint`'s
`metrics`), every evaluation step is a checkpoint step when the metric is an evaluation's, and
a checkpoint that becomes the best is exported at once as `best/` beside `final/` (its weights
are the ranks' then) and reported (`Reporter.on_best`); a resumed run knows the best from the
checkpoints' manifests.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Generic, TypeVar

import torch
from torch import Tensor

from rlhf_trainer.checkpoint import TrainerState, publish_dir
from rlhf_trainer.checkpoint_best import BestCheckpoint
from rlhf_trainer.config import JobConfig
from rlhf_trainer.config.report import EVAL_PREFIX

from .health import HealthWatch, Unhealthy
from .job import BEST_DIR, write_best_record
from .preemption import Preempted, StopCheck, never
from .protocols import CheckpointStore, Cluster, Reporter

# On a cluster these records go to the attempt's trainer.jsonl (rlhf_trainer.podlogs).
log = logging.getLogger(__name__)

# Where a step is: an update may be half applied on the ranks only while `phase == UPDATE`.
IDLE, UPDATE = "idle", "update"

C = TypeVar("C", bound=Cluster)


class NonFiniteError(FloatingPointError):
    """A stage produced NaN/inf: the run has diverged (or a reward source misbehaves)."""


def check_finite(name: str, value: Tensor, step: int, hint: str) -> None:
    if not bool(torch.isfinite(value).all()):
        bad = int((~torch.isfinite(value)).sum())
        raise NonFiniteError(f"step {step}: {name} has {bad} non-finite values (NaN/inf); {hint}")


class StepLoop(Generic[C]):
    """The skeleton; `C` is the loop's cluster protocol (the calls of its stages)."""

    def __init__(
        self,
        cfg: JobConfig,
        cluster: C,
        checkpoints: CheckpointStore,
        reporter: Reporter,
        *,
        total_steps: int,
        export_dir: Path | None,
        stop: StopCheck = never,
        state: TrainerState | None = None,
        health: HealthWatch | None = None,
    ) -> None:
        self.cfg, self.cluster, self.checkpoints, self.reporter = (
            cfg,
            cluster,
            checkpoints,
            reporter,
        )
        self.total_steps, self.export_dir, self.stop = total_steps, export_dir, stop
        self.state = state if state is not None else TrainerState()
        self.saved_step = -1
        self.resumed_from: int | None = None
        self.failure_checkpoint: Path | None = None
        self.phase = IDLE
        self.health = health if health is not None else HealthWatch(cfg.run_policy.guardrails)
        self.best: BestCheckpoint | None = None

    # --- what a loop plugs in ------------------------------------------------------------
    def train_step(self, state: TrainerState) -> TrainerState:
        """One step from `state`; sets `self.state` once the step's update is done."""
        raise NotImplementedError

    def save_driver_state(
        self, directory: Path, state: TrainerState, *, after_failure: bool
    ) -> None:
        """What a checkpoint keeps of the driver, beside the ranks' files."""
        raise NotImplementedError

    def load_driver_state(self, directory: Path) -> TrainerState:
        """The driver's state from a checkpoint whose ranks' files are loaded already."""
        raise NotImplementedError

    def export(self, directory: Path) -> None:
        """The trained model(s) in Hugging Face format into `directory`."""
        raise NotImplementedError

    def begin(self) -> None:
        """Before the first step of this run (fresh or resumed)."""

    def start_fresh(self) -> None:
        """When there is no checkpoint to resume from."""

    def models_consistent(self) -> bool:
        """Are the models those of `self.state` (no update half applied)?"""
        return self.phase != UPDATE

    def close(self) -> None:
        """At the end of `fit`, whatever happened."""

    def evaluates(self, step: int) -> bool:
        """Does `step` evaluate (report `eval/` metrics)?"""
        return False

    # --- the loop -------------------------------------------------------------------------
    def fit(self) -> TrainerState:
        self.resume()
        try:
            self.begin()
            while self.state.step < self.total_steps:
                self.stop_if_requested()
                try:
                    self.state = self.train_step(self.state)
                except NonFiniteError as err:
                    trip = self.health.diverged(self.state.step + 1, str(err))
                    if trip is None:
                        raise
                    raise Unhealthy(trip) from err
            if self.saved_step != self.state.step:
                self.checkpoint(self.state)
            if self.export_dir is not None and self.cfg.checkpoint.export_hf:
                publish_dir(self.export, self.export_dir)
        except BaseException:
            self.checkpoint_after_failure()
            raise
        finally:
            self.close()
        return self.state

    def stop_if_requested(self) -> None:
        """Raise `Preempted` at a point where the models are those of `self.state`."""
        if self.stop():
            raise Preempted(self.state.step)

    def check_health(self, step: int, metrics: Mapping[str, float]) -> None:
        """The guardrails on a finished (reported) step: `Unhealthy` when one trips, and
        `fit`'s failure path checkpoints that step."""
        trip = self.health.check(step, metrics)
        if trip is not None:
            raise Unhealthy(trip)

    def due(self, step: int) -> bool:
        """Is a checkpoint due after `step` (every `checkpoint.everySteps`, and the last)?"""
        every, best = self.cfg.checkpoint.every_steps, self.cfg.checkpoint.keep_best
        if best is not None and best.metric.startswith(EVAL_PREFIX) and self.evaluates(step):
            return True  # each evaluation's score has its checkpoint
        return bool(every and step % every == 0) or step == self.total_steps

    # --- checkpoints ----------------------------------------------------------------------
    def checkpoint(
        self,
        state: TrainerState,
        *,
        after_failure: bool = False,
        metrics: Mapping[str, float] | None = None,
    ) -> Path:
        """Save `state`; `metrics`: the step's, whose keepBest metric scores the checkpoint."""

        def write(directory: Path) -> None:
            self.cluster.save_checkpoint(str(directory))
            self.save_driver_state(directory, state, after_failure=after_failure)

        score = best_score(self.cfg, metrics)
        path = self.checkpoints.save(state.step, write, score=score)
        self.saved_step = state.step
        self.reporter.on_checkpoint(state.step, path)
        log.info(
            "checkpoint of step %d%s: %s", state.step, " (after a failure)" * after_failure, path
        )
        if score is not None:
            self.track_best(written=path)
        return path

    def track_best(self, *, written: Path | None = None) -> None:
        """Take note of the best checkpoint; when it is the one just `written` (the ranks
        hold its weights), export it as `best/` beside `final/`."""
        best = self.checkpoints.best()
        if best is None or best == self.best:
            return
        export = self.export_dir is not None and self.cfg.checkpoint.export_hf
        if export and written is not None and best.path == written and self.export_dir:

            def write(directory: Path) -> None:
                self.export(directory)
                write_best_record(directory, best)

            publish_dir(write, self.export_dir.with_name(BEST_DIR))
        self.best = best
        self.reporter.on_best(best)

    def resume(self) -> None:
        """Continue from this job's checkpoint, if it has one (see `resume_point`: only its
        own, written for this config, with all its files)."""
        c = self.cfg.checkpoint
        latest = self.checkpoints.resume_point(c.resume, c.resume_from)
        if latest is None:
            self.start_fresh()
            return
        self.cluster.load_checkpoint(str(latest.path))
        self.state = self.load_driver_state(latest.path)
        self.saved_step = self.resumed_from = self.state.step
        log.info("resumed from the checkpoint of step %d: %s", self.state.step, latest.path)
        self.track_best()  # exported when it was written

    def checkpoint_after_failure(self) -> None:
        """Save the last finished step after a failure, when that is possible and useful."""
        if self.state.step in (0, self.saved_step):
            return
        try:
            if self.models_consistent() and self.cluster.weights_finite():
                self.failure_checkpoint = self.checkpoint(self.state, after_failure=True)
        except Exception:  # the original error is the one to report
            self.failure_checkpoint = None


def best_score(cfg: JobConfig, metrics: Mapping[str, float] | None) -> float | None:
    """The keepBest metric's finite value among a step's `metrics` (None: no rule, or not
    reported)."""
    best = cfg.checkpoint.keep_best
    value = metrics.get(best.metric) if best is not None and metrics else None
    return float(value) if value is not None and math.isfinite(value) else None
