"""Reward functions shipped with the trainer (`models.rewardFunction.builtin`).

Each builtin verifies the answers of the builtin task of the same name (`rlhf_trainer.data.
builtin`). They are pure and fast, so they run in the driver's process; a user's file runs in
a worker process instead (`RewardFunctionRunner`). Both are called the same way:
`fn(queries, prompts, labels) -> RewardResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlhf_trainer.config.builtins import REPEAT_LETTER, REPEAT_LETTER_DEFAULT, split_builtin_name
from rlhf_trainer.data.builtin import letter_from_prompt, repeat_letter_score

from .output import RewardResult, parse_reward_output

ScoreFn = Callable[[Sequence[str], Sequence[str], Sequence[str | None]], list[float]]


def response_of(query: str, prompt: str) -> str:
    """The response part of a query (queries are prompt + response, OpenRLHF's convention)."""
    if query.startswith(prompt):
        return query[len(prompt) :]
    # A decoder that dropped special tokens changes the prompt's text: fall back to what
    # follows the last assistant marker, else take the whole query.
    for marker in ("<|assistant|>\n", "<|assistant|>"):
        at = query.rfind(marker)
        if at >= 0:
            return query[at + len(marker) :]
    return query


def repeat_letter(
    queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str | None]
) -> list[float]:
    """Fraction of the response's characters that are the prompt's letter (see the task)."""
    out = []
    for query, prompt, label in zip(queries, prompts, labels, strict=True):
        letter = label or letter_from_prompt(prompt) or REPEAT_LETTER_DEFAULT[0]
        out.append(repeat_letter_score(response_of(query, prompt), letter))
    return out


BUILTIN_REWARDS: dict[str, ScoreFn] = {REPEAT_LETTER: repeat_letter}


class BuiltinRewardFunction:
    """A builtin reward function by name (a `repeat-letter:<letters>` suffix is accepted, so
    the same name as the data set's `builtin` works)."""

    def __init__(self, name: str) -> None:
        base, _ = split_builtin_name(name)
        if base not in BUILTIN_REWARDS:
            raise ValueError(
                f"models.rewardFunction.builtin {name!r} is unknown; available: "
                f"{', '.join(sorted(BUILTIN_REWARDS))}"
            )
        self.name = f"builtin reward function {name!r}"
        self._fn = BUILTIN_REWARDS[base]

    def __call__(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str | None]
    ) -> RewardResult:
        return parse_reward_output(self._fn(queries, prompts, labels), len(queries), self.name)

    def close(self) -> None:
        """Nothing to release; present so every reward function closes the same way."""
