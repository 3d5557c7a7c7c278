"""Where each step's batch comes from: generated on the spot (sync), or ahead while the
previous steps train (`rollout.async`, see `schedule` for the order of events).

Async: one background thread runs, in submission order, the batches' generation and the
engines' half of each weight update (`TrainingCluster.stage_weights`: the actor packs its new
weights into the object store at once, between its updates; the engines load them when the
batches queued before are done). So the engines never mix weights within a batch, the actor
trains step t while they generate step t+1, and the driver waits only for a batch that is
not ready. With a weight sync that needs both sides at once (the NCCL/gloo broadcast) the
driver waits for the queue to empty and syncs itself.

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
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rlhf_trainer.checkpoint import TrainerState
from rlhf_trainer.config import JobConfig

from .batch import Sample
from .schedule import Rollout, check_staleness, load_rollouts, save_rollouts, steps_to_start

T = TypeVar("T")

# (step, prompt items) -> samples
GenerateStep = Callable[[int, list[Any]], list[Sample]]
# data position -> (prompt items, the position after them)
NextPrompts = Callable[[int], tuple[list[Any], int]]


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

    def __init__(self, generate: GenerateStep, next_prompts: NextPrompts, engines: Engines):
        self.generate, self.next_prompts, self.engines = generate, next_prompts, engines

    def take(self, step: int, state: TrainerState) -> Rollout:
        items, position = self.next_prompts(state.data_position)
        start = time.perf_counter()
        samples = self.generate(step, items)
        return Rollout(step, position, state.step, samples, time.perf_counter() - start)

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
        generate: GenerateStep,
        next_prompts: NextPrompts,
        engines: Engines,
        *,
        total_steps: int,
        max_staleness: int,
    ) -> None:
        self.generate, self.next_prompts, self.engines = generate, next_prompts, engines
        self.total_steps, self.max_staleness = total_steps, max_staleness
        self.worker = OrderedWorker("rlhf-rollout")
        # Started batches not yet trained on, oldest first (the head is the next step's).
        self.pending: deque[tuple[int, Future[Rollout]]] = deque()
        self.started_until = 0
        self.next_position: int | None = None
        # The weights the engines will hold once everything queued so far has run.
        self.engine_version = 0
        self.engine_sync_s = 0.0
        self.deliveries: list[Future[float]] = []

    def take(self, step: int, state: TrainerState) -> Rollout:
        """Start what the schedule says, then wait for step `step`'s batch."""
        while self.pending and self.pending[0][0] < step:
            self.pending.popleft()  # a step that failed before its update left it behind
        if self.next_position is None:
            self.next_position = state.data_position
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
        return rollout

    def _start(self, step: int) -> None:
        assert self.next_position is not None
        items, position = self.next_prompts(self.next_position)
        version = self.engine_version

        def run() -> Rollout:
            start = time.perf_counter()
            samples = self.generate(step, items)
            return Rollout(step, position, version, samples, time.perf_counter() - start)

        self.pending.append((step, self.worker.submit(run)))
        self.next_position, self.started_until = position, step

    def updated(self, step: int) -> None:
        """Step `step`'s update is done: its batch is consumed; the new weights go to the
        engines after the batches already queued."""
        if self.pending and self.pending[0][0] == step:
            self.pending.popleft()
        deliver = self.engines.stage_weights()
        if deliver is None:
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
        last = restored[-1] if restored else None
        self.next_position = last.position if last else state.data_position
        self.started_until = last.step if last else state.step
        self.engine_version = state.step

    def close(self) -> None:
        self.worker.close()


def rollout_source(
    cfg: JobConfig,
    generate: GenerateStep,
    next_prompts: NextPrompts,
    engines: Engines,
    total_steps: int,
) -> RolloutSource:
    r = cfg.rollout
    if not r.async_rollout:
        return OnPolicyRollouts(generate, next_prompts, engines)
    return AsyncRollouts(
        generate,
        next_prompts,
        engines,
        total_steps=total_steps,
        max_staleness=r.max_staleness,
    )
