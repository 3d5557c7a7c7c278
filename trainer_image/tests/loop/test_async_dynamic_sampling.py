"""Dynamic sampling with async rollout, without Ray: the background producer runs a batch's
rounds (scoring included) and hands over full batches; the data cursor follows the rounds in
the producer's order, so the batches are those of the sync run; every round of a batch comes
from the one policy version it records; a checkpoint's pending batches (with their rewards
and round metrics) make a resume exact.

`Engines` (from `test_async_schedule`) plays the weight versions; each sample's response is the
engine's version when it was generated, so a test sees which weights made every round.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from test_async_schedule import Engines
from torch import Tensor

from rlhf_trainer.checkpoint import TrainerState
from rlhf_trainer.config import JobConfig
from rlhf_trainer.data.dataset import OrderedDataset
from rlhf_trainer.loop.batch import Sample
from rlhf_trainer.loop.pipeline import AsyncRollouts, OnPolicyRollouts, RolloutSource
from rlhf_trainer.loop.pipeline import rollout_source as build
from rlhf_trainer.loop.schedule import (
    PENDING_ROLLOUTS_FILE,
    Rollout,
    load_rollouts,
    save_rollouts,
)

STEPS = 6


def job(*, async_rollout: bool, k: int = 1, partial: bool = False) -> JobConfig:
    rollout: dict[str, Any] = {"samplesPerPrompt": 2, "maxNewTokens": 4}
    if async_rollout:
        rollout |= {"async": True, "maxStaleness": k, "partialRollout": partial}
    return JobConfig.model_validate(
        {
            "algorithm": {"name": "grpo", "dynamicSampling": True, "dynamicSamplingMaxRounds": 3},
            "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
            "data": {"train": [{"builtin": "repeat-letter"}]},
            "rollout": rollout,
            "training": {"rolloutBatchSize": 2, "trainBatchSize": 4, "microTrainBatchSize": 2},
        }
    )


class Source:
    """Prompts are integers 0..; prompt p with p % 3 == 2 gets rewards 0 and 1 for its two
    samples (informative), any other 1 and 1 (dropped): each step takes three rounds of two
    prompts (6t..6t+5: informative 6t+2 and 6t+5)."""

    def __init__(self, cfg: JobConfig, engines: Engines) -> None:
        self.cfg, self.engines = cfg, engines
        self.prompts = OrderedDataset(list(range(1000)), seed=0, shuffle=False)
        self.fail_at: int | None = None

    def next_prompts(self, position: int) -> tuple[list[Any], int]:
        batch = next(self.prompts.batches(self.cfg.training.rollout_batch_size, start=position))
        return batch.items, batch.position

    def generate(self, step: int, items: list[Any], *, stream: str = "") -> list[Sample]:
        time.sleep(random.random() / 500)  # let weight loads race the rounds, if they could
        version = self.engines.engine
        return [
            Sample(p, [p], [version], [1], "stop", label=k, logprobs=[-0.5 - p])
            for p in items
            for k in range(2)
        ]

    def score(self, samples: list[Sample]) -> tuple[Tensor, dict[str, float]]:
        if self.fail_at is not None and samples[0].prompt_index >= self.fail_at:
            raise RuntimeError("the reward function failed")
        raw = torch.tensor(
            [float(s.label) if s.prompt_index % 3 == 2 else 1.0 for s in samples],
            dtype=torch.float32,
        )
        return raw, {"score/function": float(raw.mean())}


Record = tuple[int, int, int, list[int], list[int], list[float], dict[str, float]]


def drive(
    rollouts: RolloutSource, engines: Engines, state: TrainerState, until: int
) -> tuple[list[Record], TrainerState]:
    """The driver's part: take a batch, "train" (the actor's version becomes the step), hand
    the update over."""
    records: list[Record] = []
    for step in range(state.step + 1, until + 1):
        r = rollouts.take(step, state)
        assert r.scored is not None  # scored by the producer: the driver never scores again
        records.append(
            (
                step,
                r.position,
                r.policy_version,
                [s.prompt_index for s in r.samples],
                [s.response_ids[0] for s in r.samples],
                r.scored[0].tolist(),
                r.metrics,
            )
        )
        engines.actor = step
        state = TrainerState(step=step, data_position=r.position)
        rollouts.updated(step)
    return records, state


def run(cfg: JobConfig) -> list[Record]:
    engines = Engines()
    rollouts = build(cfg, Source(cfg, engines), engines, STEPS)
    records, _ = drive(rollouts, engines, TrainerState(), STEPS)
    rollouts.close()
    return records


def without_versions(records: list[Record]) -> list[tuple[Any, ...]]:
    return [(step, pos, prompts, rewards) for step, pos, _, prompts, _, rewards, _ in records]


@pytest.mark.parametrize("k", [1, 2])
def test_the_producer_hands_over_full_batches_read_in_order(k: int) -> None:
    cfg = job(async_rollout=True, k=k)
    engines = Engines()
    pipeline = build(cfg, Source(cfg, engines), engines, STEPS)
    assert isinstance(pipeline, AsyncRollouts)
    pipeline.close()
    records = run(cfg)
    sync = run(job(async_rollout=False))
    # The same prompts, rounds and rewards as the sync run: only the weights differ.
    assert without_versions(records) == without_versions(sync)
    positions = [r[1] for r in records]
    assert positions == [6, 12, 18, 24, 30, 36]  # 3 rounds of 2 prompts a step
    for step, _, version, prompts, responses, rewards, metrics in records:
        assert all(p % 3 == 2 for p in prompts), f"step {step} kept a dropped group"
        assert rewards == [0.0, 1.0, 0.0, 1.0]
        # Every round of the batch, refills included, came from the version it records.
        assert set(responses) == {version}, f"step {step} mixed weights across its rounds"
        assert metrics["dynamic_sampling/extra_rounds"] == 2.0
    versions = [r[2] for r in records]
    assert versions == ([0, 0, 1, 2, 3, 4] if k == 1 else [0, 0, 0, 1, 2, 3])


@pytest.mark.parametrize("k", [1, 2])
def test_a_resume_from_saved_batches_repeats_the_straight_run(tmp_path: Path, k: int) -> None:
    cfg = job(async_rollout=True, k=k)
    expected = run(cfg)

    engines = Engines()
    first = build(cfg, Source(cfg, engines), engines, STEPS)
    before, state = drive(first, engines, TrainerState(), 3)
    first.save(tmp_path, state)
    first.close()
    saved = json.loads((tmp_path / PENDING_ROLLOUTS_FILE).read_text())["rollouts"]
    # The data cursor (step 3's end) and the batches after it are consistent: they go on
    # from there, and each carries where the next one starts.
    assert state.data_position == 18
    assert [(r["step"], r["position"]) for r in saved] == [(4 + i, 24 + 6 * i) for i in range(k)]

    resumed_engines = Engines()  # a new process: the restored weights are synced
    resumed_engines.actor = resumed_engines.engine = state.step
    resumed = build(cfg, Source(cfg, resumed_engines), resumed_engines, STEPS)
    resumed.resume(tmp_path, state)
    after, _ = drive(resumed, resumed_engines, state, STEPS)
    resumed.close()
    assert before + after == expected


def test_saved_batches_keep_their_rewards_and_round_metrics(tmp_path: Path) -> None:
    raw = torch.tensor([0.1, 1 / 3, -2.5, 7.0], dtype=torch.float32)
    sample = Sample(0, [1], [5], [1], "stop", logprobs=[-0.25])
    rollout = Rollout(
        4,
        40,
        2,
        [sample] * 4,
        scored=(raw, {"score/function": 0.5}),
        metrics={"dynamic_sampling/extra_rounds": 2.0, "reward": 1 / 3},
    )
    save_rollouts([rollout, Rollout(5, 46, 3, [sample])], tmp_path)
    loaded, plain = load_rollouts(tmp_path, after_step=3)
    assert loaded.scored is not None and plain.scored is None
    assert loaded.scored[0].dtype == torch.float32 and torch.equal(loaded.scored[0], raw)
    assert loaded.scored[1] == {"score/function": 0.5}
    assert loaded.metrics == rollout.metrics and plain.metrics == {}
    assert (loaded.step, loaded.position, loaded.policy_version) == (4, 40, 2)
    assert loaded.samples == rollout.samples


def test_a_failed_round_fails_its_step_and_those_after() -> None:
    cfg = job(async_rollout=True)
    engines = Engines()
    source = Source(cfg, engines)
    source.fail_at = 8  # step 2's second round
    rollouts = build(cfg, source, engines, STEPS)
    records, state = drive(rollouts, engines, TrainerState(), 1)
    assert records[0][1] == 6
    with pytest.raises(RuntimeError, match="the reward function failed"):
        rollouts.take(2, state)
    # Step 3's batch (started with step 2's take) reads on from step 2's end, which never
    # came: it fails the same way rather than read from a wrong position.
    with pytest.raises(RuntimeError, match="the reward function failed"):
        rollouts.take(3, TrainerState(step=2))
    rollouts.close()


def test_sync_dynamic_sampling_is_on_policy() -> None:
    cfg = job(async_rollout=False)
    engines = Engines()
    rollouts = build(cfg, Source(cfg, engines), engines, STEPS)
    assert isinstance(rollouts, OnPolicyRollouts)
    records, _ = drive(rollouts, engines, TrainerState(), 3)
    assert [r[2] for r in records] == [0, 1, 2]  # staleness 0


class HeldRound(Source):
    """Holds step 2's first refill round until the test lets it go (after a weight load)."""

    def __init__(self, cfg: JobConfig, engines: Engines) -> None:
        super().__init__(cfg, engines)
        self.release = threading.Event()

    def generate(self, step: int, items: list[Any], *, stream: str = "") -> list[Sample]:
        if (step, stream) == (2, "round1"):
            assert self.release.wait(timeout=10), "the test never let the round go"
        return super().generate(step, items, stream=stream)


def test_with_partial_rollout_a_batch_counts_staleness_from_its_oldest_round() -> None:
    cfg = job(async_rollout=True, partial=True)
    engines = Engines()
    source = HeldRound(cfg, engines)
    rollouts = build(cfg, source, engines, STEPS)
    first, state = drive(rollouts, engines, TrainerState(), 1)  # starts step 2's batch
    source.release.set()  # step 1's weights were loaded at once: step 2's refills see them
    second, _ = drive(rollouts, engines, state, 2)
    rollouts.close()
    (_, _, version, _, responses, _, metrics) = second[0]
    # The refills (which hold the kept groups) ran on step 1's weights, loaded at once while
    # the batch was in flight; the batch records the version it started with, the oldest,
    # so its staleness (1) bounds every sample's.
    assert first[0][2] == version == 0 and responses == [1, 1, 1, 1]
    assert metrics["dynamic_sampling/extra_rounds"] == 2.0
