"""The bounded metrics history (`status.trainer.history`): a few hundred points per metric over
the whole run, newest last, in the operator's status model."""

from __future__ import annotations

import itertools
import json

from rlhf_trainer.config.history import MAX_POINTS, MetricsHistory
from rlhf_trainer.objectives.online import MISMATCH_PREFIX, MISMATCH_STATS


def test_a_short_run_keeps_every_step() -> None:
    history = MetricsHistory()
    for step in range(1, 11):
        history.add(step, {"reward": step / 10, "kl": 0.01, "other": 5.0})
    out = history.to_json()
    assert set(out) == {"reward", "kl"}  # only the curves' metrics
    assert out["reward"] == [[s, s / 10] for s in range(1, 11)]


def test_a_long_run_is_downsampled_over_its_whole_span_and_ends_at_the_latest_step() -> None:
    history = MetricsHistory()
    steps = 10_000
    for step in range(1, steps + 1):
        history.add(step, {"reward": float(step)})
    points = history.to_json()["reward"]
    assert MAX_POINTS // 2 <= len(points) <= MAX_POINTS
    xs = [p[0] for p in points]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    assert xs[0] <= steps / MAX_POINTS * 2 and xs[-1] == steps
    gaps = {b - a for a, b in itertools.pairwise(xs[:-1])}
    assert len(gaps) == 1  # evenly spaced, but for the latest point
    assert len(json.dumps(history.to_json())) < 8 * 1024


def test_sparse_metrics_keep_their_own_steps() -> None:
    history = MetricsHistory(max_points=4)
    for step in range(1, 41):
        metrics = {"reward": 1.0}
        if step % 10 == 0:
            metrics["eval/greedy_reward"] = step / 100
        history.add(step, metrics)
    out = history.to_json()
    assert out["eval/greedy_reward"][-1] == [40, 0.4]
    assert len(out["eval/greedy_reward"]) <= 4 and len(out["reward"]) <= 4


def test_a_resumed_run_replaces_the_steps_it_repeats() -> None:
    history = MetricsHistory()
    for step in (1, 2, 3, 4):
        history.add(step, {"reward": 0.0})
    for step in (3, 4, 5):
        history.add(step, {"reward": 1.0})
    assert history.to_json()["reward"] == [[1, 0.0], [2, 0.0], [3, 1.0], [4, 1.0], [5, 1.0]]


def test_values_are_rounded_to_six_significant_digits() -> None:
    history = MetricsHistory()
    history.add(1, {"reward": 0.123456789})
    assert history.to_json()["reward"] == [[1, 0.123457]]


def test_the_rollout_correction_metrics_are_kept_for_the_console() -> None:
    # What a step with algorithm.rolloutCorrection on reports (objectives.online).
    correction = {f"{MISMATCH_PREFIX}{name}": 0.5 for name in MISMATCH_STATS}
    assert "rollout/mismatch_kl" in correction
    history = MetricsHistory()
    for step in (1, 2):
        history.add(step, {"reward": 1.0, **correction})
    out = history.to_json()
    assert set(correction) <= set(out)
    assert out["rollout/mismatch_kl"] == [[1, 0.5], [2, 0.5]]
