"""`models.rewardFunction.onError: zero`: the samples that make the function fail score 0."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rlhf_trainer.config import RewardFunction
from rlhf_trainer.rewards.function_runner import (
    RewardFunctionLimitError,
    RewardFunctionLoadError,
    RewardFunctionRunner,
)
from rlhf_trainer.rewards.on_error import ZeroOnError
from rlhf_trainer.rewards.sources import build_reward_function

pytestmark = pytest.mark.timeout(120)

# A response holding "boom" makes the function allocate past its 256 MiB.
BODY = """
def reward_func(queries, prompts, labels):
    if any("boom" in q for q in queries):
        return [len(b"x" * (1 << 30)) for _ in queries]
    return {"rewards": [float(len(q)) for q in queries], "extra_logs": {"calls": 1}}
"""


def zero_on_error(tmp_path: Path, body: str = BODY) -> ZeroOnError:
    (tmp_path / "reward.py").write_text(textwrap.dedent(body))
    cfg = RewardFunction.model_validate(
        {"path": "reward.py", "onError": "zero", "limits": {"memoryMiB": 256}}
    )
    fn = build_reward_function(cfg, tmp_path)
    assert isinstance(fn, ZeroOnError) and fn.runner.limits.memory_mib == 256
    return fn


def test_only_the_failing_sample_scores_zero(tmp_path: Path) -> None:
    fn = zero_on_error(tmp_path)
    try:
        result = fn(["ab", "boom", "abcd"], ["p"] * 3, [None] * 3)
        assert result.rewards.tolist() == [2.0, 0.0, 4.0]
        assert result.extra_logs == {"calls": 1.0, "errors": pytest.approx(1 / 3)}
        # A batch that works is scored whole, and says so.
        ok = fn(["ab", "abc"], ["p"] * 2, [None] * 2)
        assert ok.rewards.tolist() == [2.0, 3.0] and ok.extra_logs["errors"] == 0.0
    finally:
        fn.close()


def test_a_function_failing_on_every_sample_still_ends_the_run(tmp_path: Path) -> None:
    fn = zero_on_error(tmp_path)
    try:
        with pytest.raises(RewardFunctionLimitError, match=r"limits\.memoryMiB"):
            fn(["boom 1", "boom 2"], ["p"] * 2, [None] * 2)
    finally:
        fn.close()


def test_a_file_that_does_not_load_is_never_scored_zero(tmp_path: Path) -> None:
    fn = zero_on_error(tmp_path, "def reward_func(:\n")
    try:
        with pytest.raises(RewardFunctionLoadError, match="SyntaxError"):
            fn(["a", "b"], ["p"] * 2, [None] * 2)
    finally:
        fn.close()


def test_fail_is_the_default(tmp_path: Path) -> None:
    (tmp_path / "reward.py").write_text(BODY)
    fn = build_reward_function(RewardFunction(path="reward.py"), tmp_path)
    assert isinstance(fn, RewardFunctionRunner)
    fn.close()
