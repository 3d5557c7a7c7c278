"""Async rollout's scheduling, without Ray: which batches start when, on which weights, how
stale they are when trained, and that a checkpoint's saved batches make a resume exact.

`Engines` stands in for the cluster: it records the weights the actor has (`actor`) and the
weights the engines generate with (`engine`); each generated sample's response is the
engine's weight version at the time it ran, so a test sees which weights made each batch.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlhf_trainer.checkpoint import TrainerState
from rlhf_trainer.loop.batch import Sample, behaviour_log_probs
from rlhf_trainer.loop.pipeline import AsyncRollouts, OrderedWorker, plain_producer
from rlhf_trainer.loop.schedule import (
    PENDING_ROLLOUTS_FILE,
    Rollout,
    StalenessError,
    check_staleness,
    load_rollouts,
    save_rollouts,
    staleness,
    steps_to_start,
)


@pytest.mark.parametrize(
    ("step", "started_until", "total", "k", "expected"),
    [
        pytest.param(1, 0, 6, 1, [1, 2], id="first-step-starts-itself-and-the-next"),
        pytest.param(2, 2, 6, 1, [3], id="then-one-ahead"),
        pytest.param(6, 6, 6, 1, [], id="never-past-the-last-step"),
        pytest.param(5, 5, 6, 1, [6], id="the-last-one"),
        pytest.param(1, 0, 6, 2, [1, 2, 3], id="two-ahead"),
        pytest.param(4, 3, 6, 1, [4, 5], id="resumed-without-saved-batches"),
        pytest.param(1, 0, 1, 3, [1], id="one-step-run"),
    ],
)
def test_steps_to_start(
    step: int, started_until: int, total: int, k: int, expected: list[int]
) -> None:
    assert list(steps_to_start(step, started_until, total, k)) == expected


def test_staleness_is_counted_in_optimizer_steps() -> None:
    assert staleness(step=1, policy_version=0) == 0  # sync rollout, first step
    assert staleness(step=5, policy_version=3) == 1  # one step off-policy
    check_staleness(Rollout(5, 0, 3, []), max_staleness=1)
    with pytest.raises(StalenessError, match=r"2 steps behind; rollout\.maxStaleness is 1"):
        check_staleness(Rollout(5, 0, 2, []), max_staleness=1)
    with pytest.raises(ValueError, match="max_staleness"):
        steps_to_start(1, 0, 5, 0)


def sample(response: list[int], logprobs: list[float] | None = None) -> Sample:
    return Sample(0, [1, 2], response, [1] * len(response), "stop", logprobs=logprobs)


def test_saved_batches_round_trip_and_only_consecutive_ones_load(tmp_path: Path) -> None:
    rollouts = [
        Rollout(4, 40, 2, [sample([7, 8], [-0.5, -1.5]), sample([9])]),
        Rollout(5, 50, 3, [sample([3])]),
    ]
    rollouts[1].samples[0].item = {"letter": "a", "meta": {"n": [1, 2]}}  # a grader's row
    save_rollouts(rollouts, tmp_path)
    assert load_rollouts(tmp_path, after_step=3) == rollouts
    assert load_rollouts(tmp_path, after_step=2) == []  # saved for another checkpoint
    assert load_rollouts(tmp_path / "none", after_step=3) == []
    (tmp_path / PENDING_ROLLOUTS_FILE).write_text("{")
    with pytest.raises(ValueError, match="cannot read the pending rollouts"):
        load_rollouts(tmp_path, after_step=3)


def test_behaviour_log_probs_are_laid_out_as_the_action_mask() -> None:
    batch = behaviour_log_probs([sample([7, 8], [-0.5, -1.5]), sample([9], [-2.0])])
    assert batch is not None and batch.tolist() == [[-0.5, -1.5], [-2.0, 0.0]]
    assert behaviour_log_probs([sample([7], [-0.5]), sample([9])]) is None
    with pytest.raises(ValueError, match="logprobs has 1 entries for 2"):
        sample([7, 8], [-0.5])


def test_ordered_worker_runs_calls_in_order_and_keeps_errors() -> None:
    worker = OrderedWorker("test")
    seen: list[int] = []

    def job(i: int) -> Callable[[], int]:
        def run() -> int:
            time.sleep(random.random() / 100)
            seen.append(i)
            return i

        return run

    futures = [worker.submit(job(i)) for i in range(5)]
    failed = worker.submit(lambda: 1 // 0)
    assert [f.result() for f in futures] == [0, 1, 2, 3, 4] == seen
    with pytest.raises(ZeroDivisionError):
        failed.result()
    worker.close()


class Engines:
    """The actor's weight version and the engines'; `stage_weights` as the object store does
    (None plays the broadcast, which syncs at once)."""

    def __init__(self, *, staged: bool = True) -> None:
        self.actor = self.engine = 0
        self.staged = staged
        self.syncs = 0

    def sync_weights(self) -> float:
        self.engine = self.actor
        self.syncs += 1
        return 0.0

    def stage_weights(self) -> Callable[[], float] | None:
        if not self.staged:
            return None
        version = self.actor

        def deliver() -> float:
            time.sleep(random.random() / 200)
            self.engine = version
            return 0.0

        return deliver

    def generate(self, step: int, items: list[Any]) -> list[Sample]:
        time.sleep(random.random() / 200)
        return [Sample(i, [i], [self.engine], [1], "stop", logprobs=[-1.0]) for i in items]


def next_prompts(position: int) -> tuple[list[Any], int]:
    return [position, position + 1], position + 2


Record = tuple[int, int, int, list[int], list[int]]


def drive(
    pipeline: AsyncRollouts, engines: Engines, state: TrainerState, until: int
) -> tuple[list[Record], TrainerState]:
    """The driver's part: take a batch, "train" (the actor's version becomes the step),
    hand the update over."""
    records: list[Record] = []
    for step in range(state.step + 1, until + 1):
        rollout = pipeline.take(step, state)
        responses = [s.response_ids[0] for s in rollout.samples]
        prompts = [s.prompt_index for s in rollout.samples]
        records.append((step, rollout.position, rollout.policy_version, prompts, responses))
        engines.actor = step
        state = TrainerState(step=step, data_position=rollout.position)
        pipeline.updated(step)
    return records, state


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("staged", [True, False], ids=["object-store", "broadcast"])
def test_each_batch_comes_from_the_weights_its_version_says(k: int, staged: bool) -> None:
    engines = Engines(staged=staged)
    pipeline = AsyncRollouts(
        plain_producer(engines.generate, next_prompts), engines, total_steps=6, max_staleness=k
    )
    records, _ = drive(pipeline, engines, TrainerState(), 6)
    pipeline.close()
    for step, _, version, _, responses in records:
        assert set(responses) == {version}, f"step {step} mixed weights"
    versions = [version for _, _, version, _, _ in records]
    if k == 1:
        assert versions == [0, 0, 1, 2, 3, 4]  # staleness 0, then 1
    else:
        assert versions == [0, 0, 0, 1, 2, 3]  # staleness 0, 1, then 2
    assert [r[3] for r in records] == [[2 * i, 2 * i + 1] for i in range(6)]  # data in order
    assert engines.syncs == (0 if staged else 6)


@pytest.mark.parametrize("k", [1, 2])
def test_a_resume_from_saved_batches_repeats_the_straight_run(tmp_path: Path, k: int) -> None:
    engines = Engines()
    straight = AsyncRollouts(
        plain_producer(engines.generate, next_prompts), engines, total_steps=6, max_staleness=k
    )
    expected, _ = drive(straight, engines, TrainerState(), 6)

    engines = Engines()
    first = AsyncRollouts(
        plain_producer(engines.generate, next_prompts), engines, total_steps=6, max_staleness=k
    )
    before, state = drive(first, engines, TrainerState(), 3)
    first.save(tmp_path, state)
    first.close()
    assert [r.step for r in load_rollouts(tmp_path, 3)] == list(range(4, 4 + k))

    resumed_engines = Engines()  # a new process: the restored weights are synced first
    resumed_engines.actor = resumed_engines.engine = state.step
    resumed = AsyncRollouts(
        plain_producer(resumed_engines.generate, next_prompts),
        resumed_engines,
        total_steps=6,
        max_staleness=k,
    )
    resumed.resume(tmp_path, state)
    after, _ = drive(resumed, resumed_engines, state, 6)
    assert before + after == expected


def test_a_failed_weight_load_is_raised_by_the_next_take() -> None:
    engines = Engines()

    def broken() -> Callable[[], float]:
        def deliver() -> float:
            raise RuntimeError("engine died while loading")

        return deliver

    engines.stage_weights = broken  # type: ignore[method-assign]
    pipeline = AsyncRollouts(
        plain_producer(engines.generate, next_prompts), engines, total_steps=4, max_staleness=1
    )
    with pytest.raises(RuntimeError, match="engine died while loading"):
        drive(pipeline, engines, TrainerState(), 4)


@pytest.mark.parametrize("staged", [True, False], ids=["object-store", "broadcast"])
def test_evaluation_on_the_engines_sees_the_weights_of_the_step_just_trained(
    staged: bool,
) -> None:
    engines = Engines(staged=staged)
    pipeline = AsyncRollouts(
        plain_producer(engines.generate, next_prompts), engines, total_steps=5, max_staleness=2
    )
    state, seen = TrainerState(), []
    for step in range(1, 6):
        rollout = pipeline.take(step, state)
        engines.actor = step
        state = TrainerState(step=step, data_position=rollout.position)
        pipeline.updated(step)
        # Queued behind the batches generated ahead and the weight load: never older weights.
        seen.append(pipeline.on_engines(lambda: engines.engine))
    pipeline.close()
    assert seen == [1, 2, 3, 4, 5]
