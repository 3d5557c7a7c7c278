"""The config's names of builtin tasks and reward functions are the trainer's registries, so a
spec that names one is refused by `rlhf validate` exactly when the trainer could not run it."""

from __future__ import annotations

import pytest

from rlhf_trainer.config.builtins import (
    BUILTIN_REWARD_NAMES,
    BUILTIN_TASK_NAMES,
    builtin_problem,
)
from rlhf_trainer.data.builtin import BUILTIN_TASKS
from rlhf_trainer.rewards.builtin import BUILTIN_REWARDS


def test_names_match_the_trainer_registries() -> None:
    assert set(BUILTIN_TASK_NAMES) == set(BUILTIN_TASKS)
    assert set(BUILTIN_REWARD_NAMES) == set(BUILTIN_REWARDS)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("repeat-letter", None),
        ("repeat-letter:abcd", None),
        ("gsm8k", "'gsm8k' is unknown; available: corpus, repeat-letter"),
        ("repeat-letter:aab", "takes distinct letters"),
        ("repeat-letter:a1", "takes distinct letters"),
    ],
)
def test_builtin_problem(name: str, problem: str | None) -> None:
    got = builtin_problem(name, BUILTIN_TASK_NAMES)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got
