"""checkpoint.keepBest: the pure retention decision, and the checkpoint directory keeping
(and resuming with) the best-scoring checkpoint besides the newest `keep`."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from rlhf_trainer.checkpoint import COMPLETE_MARKER, CheckpointManager
from rlhf_trainer.checkpoint_best import Candidate, Score, best_index, to_remove
from rlhf_trainer.config import BestMode, KeepBest

PASS = "eval/pass@1"
MAX = KeepBest(metric=PASS, mode=BestMode.MAX)
MIN = KeepBest(metric="distill/reverse_kl", mode=BestMode.MIN)


def scored(*values: float | None, metric: str = PASS) -> list[Candidate]:
    """Checkpoints of steps 10, 20, ... (publish order) with these scores."""
    return [
        Candidate(10 * (i + 1), None if v is None else Score(metric, v))
        for i, v in enumerate(values)
    ]


@pytest.mark.parametrize(
    ("checkpoints", "keep", "rule", "removed"),
    [
        pytest.param(scored(0.1, 0.9, 0.2, 0.3), 1, None, [0, 1, 2], id="no-rule-keeps-newest"),
        pytest.param(scored(0.1, 0.9, 0.2, 0.3), 1, MAX, [0, 2], id="max-keeps-the-best-too"),
        pytest.param(scored(0.1, 0.9, 0.2, 0.3), 2, MAX, [0], id="best-counts-once"),
        pytest.param(scored(0.1, 0.2, 0.9), 1, MAX, [0, 1], id="best-is-newest"),
        pytest.param(scored(0.5, 0.1, 0.4, metric="distill/reverse_kl"), 1, MIN, [0], id="min"),
        pytest.param(scored(0.9, 0.9, 0.1), 1, MAX, [1], id="tie-keeps-the-first"),
        pytest.param(scored(None, 0.2, None, None), 1, MAX, [0, 2], id="unscored-rotate"),
        pytest.param(scored(None, None, None), 1, MAX, [0, 1], id="nothing-scored"),
        pytest.param(scored(math.nan, 0.1, 0.0), 1, MAX, [0], id="nan-never-best"),
        pytest.param(
            scored(0.9, 0.1, 0.2, metric="eval/mean_reward"), 1, MAX, [0, 1], id="other-metric"
        ),
        pytest.param([], 1, MAX, [], id="empty"),
    ],
)
def test_rotation_removes_all_but_the_newest_and_the_best(
    checkpoints: list[Candidate], keep: int, rule: KeepBest | None, removed: list[int]
) -> None:
    assert to_remove(checkpoints, keep, rule) == removed


@pytest.mark.parametrize(
    ("values", "rule", "best"),
    [
        ((0.1, 0.9, 0.2), MAX, 1),
        ((0.1, 0.9, 0.2), KeepBest(metric=PASS, mode=BestMode.MIN), 0),
        ((None, math.inf, 0.2), MAX, 2),
        ((0.3, 0.3), MAX, 0),
    ],
)
def test_best_index(values: tuple[float | None, ...], rule: KeepBest, best: int) -> None:
    assert best_index(scored(*values), rule) == best


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"checkpoint\.keep"):
        to_remove(scored(0.1), 0, MAX)


def write(text: str) -> Callable[[Path], None]:
    def fill(directory: Path) -> None:
        (directory / "weights.txt").write_text(text)

    return fill


def test_keep_best_keeps_what_keep_1_alone_deletes(tmp_path: Path) -> None:
    """The best of four scored checkpoints (step 20) survives `keep: 1`, which without
    keepBest leaves only step 40; unscored and worse ones rotate away as before."""
    plain = CheckpointManager(tmp_path / "plain", keep=1)
    best = CheckpointManager(tmp_path / "best", keep=1, keep_best=MAX)
    for step, score in ((10, 0.25), (20, 0.75), (30, 0.5), (40, 0.5)):
        plain.save(step, write(f"w{step}"), score=score)
        best.save(step, write(f"w{step}"), score=score)
    assert [r.step for r in plain.checkpoints()] == [40]
    assert [r.step for r in best.checkpoints()] == [20, 40]
    found = best.best()
    assert found is not None
    assert (found.step, found.metric, found.score) == (20, PASS, 0.75)
    assert (found.path / "weights.txt").read_text() == "w20"
    assert best.latest() is not None and best.latest().step == 40  # type: ignore[union-attr]
    marker = json.loads((found.path / COMPLETE_MARKER).read_text())
    assert marker["score"] == {"metric": PASS, "value": 0.75}
    # A resumed run (a new manager on the same directory) knows the best, and a better
    # score later takes its place (the old best is then rotated away).
    again = CheckpointManager(tmp_path / "best", keep=1, keep_best=MAX)
    assert again.best() == found
    again.save(50, write("w50"), score=0.875)
    again.save(60, write("w60"), score=None)
    assert [r.step for r in again.checkpoints()] == [50, 60]
    assert again.best() is not None and again.best().step == 50  # type: ignore[union-attr]


def test_a_score_is_recorded_only_with_keep_best(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=2)
    path = manager.save(5, write("w"), score=0.5)
    assert "score" not in json.loads((path / COMPLETE_MARKER).read_text())
    assert manager.best() is None
