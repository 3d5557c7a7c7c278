"""Where each step's batch comes from: generated on the spot (sync), or ahead while the
previous steps train (`rollout.async`, see `schedule` for the order of events).

Async: one background thread runs, in submission order, the batches' generation and the
engines' half of each weight update (`TrainingCluster.stage_weights`: the actor packs its new
weights into the object store at once, between its updates; the engines load them when the
batches queued before are done). So the engines never mix weights within a batch, the actor
trains step t while they generate step t+1, and the driver waits only for a batch that is
not ready. With a weight sync that needs both sides at once (the NCCL/gloo broadcast) the
driver waits for the queue to empty and syncs itself. With `rollout.partialRollout` the
driver syncs at once instead: the engines pause the batch in flight, load, and resume it by
the new weights (`vllm_pausable`), so a batch's samples may span two or more versions.

The background thread also advances the data cursor: a batch reads its prompts from where
the batch before it ended, which with dynamic sampling (`algorithm.dynamicSampling`) is known
only once that batch's rounds are scored. So a producer call (`ProduceStep`) is the whole
batch: prompts, generation and, with dynamic sampling, scoring and refill rounds, run back to
back in one job. Without partial rollout no weight load falls between a batch's rounds (loads
queue behind it), so every batch comes from one policy version, the one its staleness is
counted and bounded from, and the batches and data positions are the same run after run.

The batches generated for steps after a checkpoint are saved with it (`schedule.save_rollouts`):
their weights are gone after the update, and a resumed run must train on the same ones.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rlhf_trainer.checkpoint import TrainerState
from rlhf_trainer.config import JobConfig

from .batch import Sample
from .dynamic_sampling import RoundSource, dynamic_rollout
from .schedule import (
    Rollout,
    check_staleness,
    load_rollouts,
    save_rollouts,
    steps_to_start,
    version_metrics,
)

T = TypeVar("T")

# (step, prompt items) -> samples
GenerateStep = Callable[[int, list[Any]], list[Sample]]
# data position -> (prompt items, the position after them)
NextPrompts = Callable[[int], tuple[list[Any], int]]
# (step, data position, policy version of the engines) -> the step's batch read from there
ProduceStep = Callable[[int, int, int], Rollout]


def plain_producer(generate: GenerateStep, next_prompts: NextPrompts) -> ProduceStep:
    """One batch of `rolloutBatchSize` prompts, generated once."""

    def produce(step: int, position: int, policy_version: int) -> Rollout:
        items, after = next_prompts(position)
        start = time.perf_counter()
        samples = generate(step, items)
        return Rollout(step, after, policy_version, samples, time.perf_counter() - start)

    return produce


class Engines(Protocol):
    def sync_weights(self) -> float: ...
    def stage_weights(self) -> Callable[[], float] | None: ...


class RolloutSource(Protocol):
    def take(self, step: int, state: TrainerState) -> Rollout: ...
    def updated(self, step: int) -> None: ...
    def on_engines(self, fn: Callable[[], T]) -> T: ...
    def save(self, directory: Path, state: TrainerState, *, wait: bool = True) -> None: ...
    def resume(self, directory: Path, state: TrainerState) -> None: ...
    def close(self) -> None: ...


class OnPolicyRollouts:
    """Sync rollout: each step generates its batch with the weights it trains."""

    def __init__(self, produce: ProduceStep, engines: Engines):
        self.produce, self.engines = produce, engines

    def take(self, step: int, state: TrainerState) -> Rollout:
        return self.produce(step, state.data_position, state.step)

    def updated(self, step: int) -> None:
        self.engines.sync_weights()

    def on_engines(self, fn: Callable[[], T]) -> T:
        """Run `fn` (evaluation) on the engines, which hold the latest weights."""
        return fn()

    def save(self, directory: Path, state: TrainerState, *, wait: bool = True) -> None:
        return None  # nothing generated ahead

    def resume(self, directory: Path, state: TrainerState) -> None:
        return None

    def close(self) -> None:
        return None


class OrderedWorker:
    """One daemon thread that runs submitted calls one at a time, in submission order."""

    def __init__(self, name: str) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self.jobs.put((fn, future))
        return future

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as err:
                future.set_exception(err)

    def close(self) -> None:
        self.jobs.put(None)  # the thread ends after the calls already queued


class AsyncRollouts:
    """Batches generated up to `max_staleness` steps ahead, by the weights of their time."""

    def __init__(
        self,
        produce: ProduceStep,
        engines: Engines,
        *,
        total_steps: int,
        max_staleness: int,
        partial_rollout: bool = False,
    ) -> None:
        self.produce, self.engines = produce, engines
        self.total_steps, self.max_staleness = total_steps, max_staleness
        self.partial = partial_rollout
        self.worker = OrderedWorker("rlhf-rollout")
        # Started batches not yet trained on, oldest first (the head is the next step's).
        self.pending: deque[tuple[int, Future[Rollout]]] = deque()
        self.started_until = 0
        # Where the next batch to start reads from: a data position, or the last started
        # batch, whose end only the producer knows (None: not known before the first take).
        self.cursor: int | Future[Rollout] | None = None
        # The weights the engines will hold once everything queued so far has run.
        self.engine_version = 0
        self.engine_sync_s = 0.0
        self.deliveries: list[Future[float]] = []

    def take(self, step: int, state: TrainerState) -> Rollout:
        """Start what the schedule says, then wait for step `step`'s batch."""
        while self.pending and self.pending[0][0] < step:
            self.pending.popleft()  # a step that failed before its update left it behind
        if self.cursor is None:
            self.cursor = state.data_position
            self.started_until = state.step
            self.engine_version = state.step
        for later in steps_to_start(step, self.started_until, self.total_steps, self.max_staleness):
            self._start(later)
        head_step, future = self.pending[0]
        if head_step != step:
            raise RuntimeError(f"step {step}: the next batch is step {head_step}'s")
        rollout = future.result()
        # Weight loads queued before this batch are done: a failed one must not pass unseen
        # (the batch would have come from older weights than its version says).
        for delivery in [d for d in self.deliveries if d.done()]:
            delivery.result()
            self.deliveries.remove(delivery)
        check_staleness(rollout, self.max_staleness)
        return replace(rollout, metrics=rollout.metrics | version_metrics(rollout.samples))

    def _start(self, step: int) -> None:
        after, version = self.cursor, self.engine_version
        assert after is not None

        def run() -> Rollout:
            # The batch before ran earlier on this thread: its end is known (or its error,
            # which fails this batch too).
            position = after if isinstance(after, int) else after.result().position
            return self.produce(step, position, version)

        future: Future[Rollout] = self.worker.submit(run)
        self.pending.append((step, future))
        self.cursor, self.started_until = future, step

    def updated(self, step: int) -> None:
        """Step `step`'s update is done: its batch is consumed; the new weights go to the
        engines after the batches already queued."""
        if self.pending and self.pending[0][0] == step:
            self.pending.popleft()
        if self.partial:
            # The engines pause the batches in flight, load the weights and resume them.
            self.engines.sync_weights()
        elif (deliver := self.engines.stage_weights()) is None:
            for _, future in self.pending:
                future.result()
            self.engines.sync_weights()
        else:
            self.deliveries.append(self.worker.submit(lambda: self._timed(deliver)))
        self.engine_version = step

    def on_engines(self, fn: Callable[[], T]) -> T:
        """Run `fn` (evaluation) once the engines hold the latest weights: queued after the
        batches and weight loads already submitted, and waited for."""
        result: T = self.worker.submit(fn).result()
        return result

    def _timed(self, deliver: Callable[[], float]) -> float:
        self.engine_sync_s = deliver()
        return self.engine_sync_s

    def save(self, directory: Path, state: TrainerState, *, wait: bool = True) -> None:
        """The started batches of the steps after `state.step`; `wait=False` (after a
        failure, which may be an engine's) keeps only those already done."""
        save_rollouts(self._ready_after(state.step, wait=wait), directory)

    def _ready_after(self, step: int, *, wait: bool) -> list[Rollout]:
        out: list[Rollout] = []
        for later, future in self.pending:
            if later <= step:
                continue
            if not wait and (not future.done() or future.exception() is not None):
                break
            out.append(future.result())
        return out

    def resume(self, directory: Path, state: TrainerState) -> None:
        """Take over the batches the checkpoint saved; later ones are started afresh."""
        restored = load_rollouts(directory, state.step)
        self.pending.clear()
        for rollout in restored:
            done: Future[Rollout] = Future()
            done.set_result(rollout)
            self.pending.append((rollout.step, done))
        self.cursor = self.pending[-1][1] if self.pending else state.data_position
        self.started_until = restored[-1].step if restored else state.step
        self.engine_version = state.step

    def close(self) -> None:
        self.worker.close()


def rollout_source(
    cfg: JobConfig, source: RoundSource, engines: Engines, total_steps: int
) -> RolloutSource:
    """Each step's batch: gathered in rounds with dynamic sampling, else generated once;
    on the spot, or ahead in the background with `rollout.async`."""
    if cfg.algorithm.dynamic_sampling:
        produce: ProduceStep = partial(dynamic_rollout, source)
    else:
        produce = plain_producer(source.generate, source.next_prompts)
    r = cfg.rollout
    if not r.async_rollout:
        return OnPolicyRollouts(produce, engines)
    return AsyncRollouts(
        produce,
        engines,
        total_steps=total_steps,
        max_staleness=r.max_staleness,
        partial_rollout=r.partial_rollout,
    )
