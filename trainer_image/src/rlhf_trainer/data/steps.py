"""A response as process-reward-model steps: token ids with the separator after every step, and
the position of each step's separator token, where the PRM is trained and read (see
`rlhf_trainer.config.steps`). The same encoding serves training data and online scoring, so a
PRM reads a policy's response exactly as it read its training data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlhf_trainer.config.steps import StepTokens


class StepTokenError(ValueError):
    """The step tokens do not fit the tokenizer (the message names the field)."""


@dataclass(frozen=True)
class StepIds:
    separator: list[int]
    positive: int
    negative: int


def _single(tokenizer: Any, text: str, field: str) -> int:
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise StepTokenError(
            f"{field}: {text!r} must be a single token of the model's tokenizer; it is "
            f"{len(ids)} tokens ({ids}); choose a token the vocabulary has"
        )
    return ids[0]


def step_ids(tokenizer: Any, tokens: StepTokens, where: str) -> StepIds:
    """The token ids of the separator and of the two label tokens; `where` names the config
    (e.g. `algorithm.prm`) for the error."""
    separator: list[int] = tokenizer(tokens.separator, add_special_tokens=False)["input_ids"]
    if not separator:
        raise StepTokenError(f"{where}.separator: {tokens.separator!r} encodes to no token")
    positive = _single(tokenizer, tokens.positive, f"{where}.positive")
    negative = _single(tokenizer, tokens.negative, f"{where}.negative")
    if positive == negative:
        raise StepTokenError(f"{where}: positive and negative must be different tokens")
    return StepIds(separator, positive, negative)


def split_steps(text: str, separator: str) -> list[str]:
    """The non-empty steps of a response (the text between separators)."""
    return [part for part in text.split(separator) if part.strip()]


def encode_steps(tokenizer: Any, steps: list[str], ids: StepIds) -> tuple[list[int], list[int]]:
    """`(token ids, separator positions)`: each step encoded on its own, then the separator;
    a step's position is its separator's last token."""
    out: list[int] = []
    positions: list[int] = []
    for step in steps:
        out += tokenizer(step, add_special_tokens=False)["input_ids"] + ids.separator
        positions.append(len(out) - 1)
    return out, positions
