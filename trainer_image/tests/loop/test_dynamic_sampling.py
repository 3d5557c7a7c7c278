"""DAPO dynamic sampling: which groups are kept, how rounds refill the batch, the bound on
rounds, and the data position a resumed run continues from (pure, with a scripted source)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from rlhf_trainer.checkpoint import TrainerState
from rlhf_trainer.config import JobConfig
from rlhf_trainer.data.dataset import OrderedDataset
from rlhf_trainer.loop.batch import Sample
from rlhf_trainer.loop.dynamic_sampling import (
    dynamic_rollout,
    informative_groups,
    mean_metrics,
    needs_another_round,
    select_groups,
    shaped_scores,
)
from rlhf_trainer.loop.pipeline import rollout_source


@pytest.mark.parametrize(
    ("scores", "size", "expected"),
    [
        pytest.param([1, 1, 0, 1], 2, [False, True], id="equal-then-mixed"),
        pytest.param([0, 0, 0, 0], 4, [False], id="all-zero"),
        pytest.param([0.5, 0.5 + 1e-7, 1, 1], 2, [False, False], id="within-tolerance"),
        pytest.param([0.2, 0.3, 0.2], 3, [True], id="one-differs"),
    ],
)
def test_informative_groups(scores: list[float], size: int, expected: list[bool]) -> None:
    assert informative_groups(scores, size) == expected


def test_scores_must_split_into_whole_groups() -> None:
    with pytest.raises(ValueError, match="3 scores do not split into groups of 2"):
        informative_groups([0, 1, 2], 2)


@pytest.mark.parametrize(
    ("rounds", "need", "max_rounds", "again"),
    [
        pytest.param([[True, False]], 2, 3, True, id="short-rounds-left"),
        pytest.param([[True, False], [True, False]], 2, 3, False, id="full"),
        pytest.param([[False, False], [False, True]], 2, 2, False, id="bound-reached"),
        pytest.param([[True, True]], 2, 1, False, id="first-round-enough"),
    ],
)
def test_needs_another_round(
    rounds: list[list[bool]], need: int, max_rounds: int, again: bool
) -> None:
    assert needs_another_round(rounds, need, max_rounds) is again


def test_select_keeps_the_first_informative_groups_and_drops_the_surplus() -> None:
    selection = select_groups([[False, True, False], [True, True, True]], need=3)
    assert selection.groups == [(0, 1), (1, 0), (1, 1)]
    assert (selection.rounds, selection.generated, selection.dropped, selection.filled) == (
        2,
        6,
        2,
        0,
    )
    assert selection.metrics() == {
        "dynamic_sampling/filtered_fraction": 2 / 6,
        "dynamic_sampling/extra_rounds": 1.0,
        "dynamic_sampling/filled_groups": 0.0,
        "dynamic_sampling/generated_groups": 6.0,
    }


def test_at_the_bound_the_batch_is_filled_with_dropped_groups_earliest_first() -> None:
    selection = select_groups([[False, True, False], [False, False, True]], need=3)
    assert selection.groups == [(0, 0), (0, 1), (1, 2)]
    assert selection.filled == 1 and selection.dropped == 4


def test_select_needs_enough_groups() -> None:
    with pytest.raises(ValueError, match="2 groups generated; a step needs 3"):
        select_groups([[True, True]], need=3)


def test_mean_metrics_weighs_rounds_by_their_samples() -> None:
    assert mean_metrics([(2, {"a": 1.0, "b": 4.0}), (6, {"a": 0.0})]) == {"a": 0.25, "b": 4.0}


def job(**algorithm: Any) -> JobConfig:
    return JobConfig.model_validate(
        {
            "algorithm": {"name": "grpo", **algorithm},
            "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
            "data": {"train": [{"builtin": "repeat-letter"}]},
            "rollout": {"samplesPerPrompt": 2, "maxNewTokens": 4},
            "training": {"rolloutBatchSize": 2, "trainBatchSize": 4, "microTrainBatchSize": 2},
        }
    )


class Source:
    """Prompts are integers 0..; a prompt's two samples get rewards `table[prompt]`."""

    def __init__(self, cfg: JobConfig, table: dict[int, tuple[float, float]]) -> None:
        self.cfg, self.table = cfg, table
        self.prompts = OrderedDataset(list(range(100)), seed=0, shuffle=False)
        self.streams: list[str] = []

    def next_prompts(self, position: int) -> tuple[list[Any], int]:
        batch = next(self.prompts.batches(self.cfg.training.rollout_batch_size, start=position))
        return batch.items, batch.position

    def generate(self, step: int, items: list[Any], *, stream: str = "") -> list[Sample]:
        self.streams.append(stream)
        return [
            Sample(p, [p], [7] * (1 + k), [1] * (1 + k), "stop", label=k)
            for p in items
            for k in range(2)
        ]

    def score(self, samples: list[Sample]) -> tuple[Tensor, dict[str, float]]:
        raw = torch.tensor([self.table.get(s.prompt_index, (0.0, 1.0))[s.label] for s in samples])
        return raw, {"score/task": float(raw.mean())}


def test_rounds_refill_the_batch_and_the_position_follows_them() -> None:
    # Prompts 0, 1 (round 0) and 2 (round 1) have equal rewards; 3 has not.
    table = {0: (1.0, 1.0), 1: (0.0, 0.0), 2: (0.5, 0.5), 3: (0.0, 1.0), 4: (1.0, 0.0)}
    source = Source(job(dynamicSampling=True), table)
    rollout = dynamic_rollout(source, step=1, position=0)
    assert [s.prompt_index for s in rollout.samples] == [3, 3, 4, 4]
    assert rollout.position == 6  # three rounds of two prompts: prompt 5 was generated too
    assert source.streams == ["", "round1", "round2"]
    assert rollout.scored is not None
    raw, reward_metrics = rollout.scored
    assert raw.tolist() == [0.0, 1.0, 1.0, 0.0]
    m = rollout.metrics
    assert m["dynamic_sampling/filtered_fraction"] == 3 / 6
    assert m["dynamic_sampling/extra_rounds"] == 2.0
    # The policy's reward is over everything generated; the batch's over what it trains on.
    assert m["reward"] == pytest.approx((2 + 0 + 1 + 1 + 1 + 1) / 12)
    assert m["dynamic_sampling/batch_reward"] == 0.5
    assert reward_metrics["score/task"] == pytest.approx(m["reward"])


def test_the_round_bound_trains_on_what_was_gathered(caplog: pytest.LogCaptureFixture) -> None:
    source = Source(job(dynamicSampling=True, dynamicSamplingMaxRounds=2), {})
    source.table = {p: (1.0, 1.0) for p in range(100)} | {3: (0.0, 1.0)}
    rollout = dynamic_rollout(source, step=1, position=0)
    assert "step 1: 2 rounds (algorithm.dynamicSamplingMaxRounds) gave 1 of 2" in caplog.text
    assert [s.prompt_index for s in rollout.samples] == [0, 0, 3, 3]
    assert rollout.position == 4
    assert rollout.metrics["dynamic_sampling/filled_groups"] == 1.0
    assert rollout.metrics["dynamic_sampling/extra_rounds"] == 1.0


def test_a_resumed_step_replays_the_same_rounds() -> None:
    table = {0: (1.0, 1.0), 2: (0.0, 0.0), 5: (1.0, 1.0)}
    source = Source(job(dynamicSampling=True), table)
    first = dynamic_rollout(source, step=1, position=0)
    second = dynamic_rollout(source, step=2, position=first.position)
    again = dynamic_rollout(Source(job(dynamicSampling=True), table), 2, first.position)
    assert [s.prompt_index for s in again.samples] == [s.prompt_index for s in second.samples]
    assert again.position == second.position == 8


def test_shaped_scores_add_the_overlong_penalty_and_clip() -> None:
    cfg = job(overlongBuffer=2, overlongPenalty=1.0, rewardClip=0.8)
    samples = [Sample(0, [1], [7] * n, [1] * n, "length") for n in (2, 3, 4)]
    scores = shaped_scores(torch.tensor([1.0, 1.0, 1.0]), samples, cfg)
    # Max 4 tokens, buffer 2: no penalty up to 2 tokens, then linear down to -1 at 4.
    assert scores.tolist() == pytest.approx([0.8, 0.5, 0.0])


class Engines:
    def __init__(self) -> None:
        self.synced = 0

    def sync_weights(self) -> float:
        self.synced += 1
        return 0.0

    def stage_weights(self) -> None:
        return None


def test_the_rollout_source_gathers_each_step_in_rounds_on_policy() -> None:
    engines = Engines()
    cfg = job(dynamicSampling=True)
    rollouts = rollout_source(cfg, Source(cfg, {0: (1.0, 1.0)}), engines, total_steps=5)
    rollout = rollouts.take(3, TrainerState(step=2, data_position=0))
    assert [s.prompt_index for s in rollout.samples] == [1, 1, 2, 2]
    assert (rollout.step, rollout.position, rollout.staleness()) == (3, 4, 0)
    assert rollout.metrics["dynamic_sampling/extra_rounds"] == 1.0
    rollouts.updated(3)
    assert engines.synced == 1
    assert rollouts.on_engines(lambda: "evaluated") == "evaluated"
