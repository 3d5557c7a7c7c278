"""Partial rollout (`rollout.partialRollout`) without Ray: a weight update reaches the batch
in flight at once (the pipeline does not wait for it), and each sample records the weight
versions that sampled its tokens."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_batch_and_rollout import PROMPTS, CharTokenizer, cfg

from rlhf_trainer.checkpoint import TrainerState
from rlhf_trainer.loop.batch import Sample
from rlhf_trainer.loop.pipeline import AsyncRollouts, plain_producer
from rlhf_trainer.loop.rollout import multi_turn, single_turn
from rlhf_trainer.loop.schedule import load_rollouts, version_metrics
from rlhf_trainer.rewards.agent_runner import ConfinedAgents


class PausableEngines:
    """Engines whose batches (after the first) sample one token, then wait for the next
    weight update to land and sample the second by the new weights, as a pausable engine
    does when an update arrives mid-batch."""

    def __init__(self) -> None:
        self.actor = self.engine = 0
        self.syncs = 0
        self.started = {step: threading.Event() for step in range(1, 10)}

    def sync_weights(self) -> float:
        self.engine = self.actor
        self.syncs += 1
        return 0.0

    def stage_weights(self) -> Callable[[], float] | None:
        raise AssertionError("partial rollout loads the weights at once, never staged")

    def generate(self, step: int, items: list[Any]) -> list[Sample]:
        first = self.engine
        self.started[step].set()
        if step > 1:
            deadline = time.monotonic() + 10
            while self.engine == first:  # the update must reach this batch in flight
                if time.monotonic() > deadline:
                    raise TimeoutError(f"step {step}: no weight update reached the batch")
                time.sleep(0.001)
        tokens = [first, self.engine]
        return [Sample(i, [i], tokens, [1, 1], "stop", [-1.0] * 2, weight_versions=tokens)
                for i in items]  # fmt: skip


def next_prompts(position: int) -> tuple[list[Any], int]:
    return [position, position + 1], position + 2


def test_an_update_reaches_the_batch_in_flight_and_samples_span_two_versions(
    tmp_path: Path,
) -> None:
    engines = PausableEngines()
    pipeline = AsyncRollouts(
        plain_producer(engines.generate, next_prompts),
        engines,
        total_steps=5,
        max_staleness=1,
        partial_rollout=True,
    )
    state, seen = TrainerState(), []
    for step in range(1, 6):
        rollout = pipeline.take(step, state)
        seen.append((rollout.policy_version, rollout.samples[0].response_ids, rollout.metrics))
        engines.actor = step
        state = TrainerState(step=step, data_position=rollout.position)
        if step < 5:  # the next batch has sampled its first token when the update lands
            assert engines.started[step + 1].wait(timeout=10)
        # Returns although step+1's batch is still waiting for these very weights.
        pipeline.updated(step)
        if step == 3:
            pipeline.save(tmp_path, state)
    pipeline.close()
    assert engines.syncs == 5
    # Step s's batch started on version s-2 (its staleness bound) and ended on s-1.
    assert [(v, r) for v, r, _ in seen] == [(0, [0, 0])] + [
        (s - 2, [s - 2, s - 1]) for s in [2, 3, 4, 5]
    ]
    assert seen[0][2]["policy_versions"] == 1.0 and seen[0][2]["mixed_version_samples"] == 0.0
    assert all(m["policy_versions"] == 2.0 == m["policy_versions_max"] for _, _, m in seen[1:])
    # A checkpoint keeps the finished batch with its versions (a resume trains on it).
    [saved] = load_rollouts(tmp_path, 3)
    assert saved.step == 4 and saved.samples[0].weight_versions == [2, 3]


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        pytest.param([[3], [3, 3]], {"policy_versions": 1.0, "policy_versions_max": 1.0,
                                     "mixed_version_samples": 0.0}, id="one-version"),
        pytest.param([[1, 2], [2], [1, 2, 3], [2]], {"policy_versions": 1.75,
                                                     "policy_versions_max": 3.0,
                                                     "mixed_version_samples": 0.5}, id="mixed"),
        pytest.param([[], []], {}, id="not-labelled"),
    ],
)  # fmt: skip
def test_version_metrics(versions: list[list[int]], expected: dict[str, float]) -> None:
    samples = [Sample(0, [1], [2], [1], "stop", weight_versions=v) for v in versions]
    assert version_metrics(samples) == expected


def labelled(answers: list[tuple[list[int], tuple[int, ...]]]) -> Any:
    """An engine answering with (ids, reason, log-probs, weight versions), as async does."""
    queue = list(answers)

    def generate(prompts: list[list[int]], seeds: list[int], n: int, max_new: int) -> Any:
        out = []
        for _ in prompts:
            group = []
            for _ in range(n):
                ids, versions = queue.pop(0)
                group.append((ids, "stop", [-0.5] * len(ids), versions))
            out.append(group)
        return out

    return generate


def test_single_turn_samples_keep_the_engines_version_labels() -> None:
    engine = labelled([([1, 2], (4,)), ([3], (4, 5)), ([4], (5,)), ([5], (5,))])
    samples = single_turn(PROMPTS, engine, CharTokenizer(), cfg(), step=1)
    assert [s.weight_versions for s in samples] == [[4], [4, 5], [5], [5]]
    assert samples[1].logprobs == [-0.5]


def test_multi_turn_episodes_keep_every_version_of_their_turns(tmp_path: Path) -> None:
    path = tmp_path / "agent.py"
    path.write_text(
        "class AgentInstance:\n"
        "    def step(self, prompt, response, label, turn):\n"
        "        return {'reward': 1.0, 'feedback': '.', 'done': turn == 1}\n"
    )
    turn1 = [([ord("a")], (1,)), ([ord("b")], (1, 2)), ([ord("c")], (2,)), ([ord("d")], (2,))]
    turn2 = [([ord("e")], (2,)), ([ord("f")], (2, 3)), ([ord("g")], (3,)), ([ord("h")], (3,))]
    job = cfg(agent={"mode": "multi-turn", "path": str(path), "maxTurns": 2})
    with ConfinedAgents(path) as agents:
        samples = multi_turn(PROMPTS, labelled(turn1 + turn2), CharTokenizer(), job, 0, agents, 64)
    assert [s.weight_versions for s in samples] == [[1, 2], [1, 2, 3], [2, 3], [2, 3]]
