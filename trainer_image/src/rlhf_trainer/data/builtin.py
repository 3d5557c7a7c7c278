"""Synthetic tasks bundled with the trainer (`data.train[].builtin`), and how they are scored.

A builtin task is a data set generator plus the verifier that scores its answers; the verifier is
registered as a builtin reward function of the same name (`rlhf_trainer.rewards.builtin`).

`corpus`: the lines of the bundled corpus (the tiny tokenizer's), as pretraining text for
PPO-ptx (`data.pretrain`).

`repeat-letter` (optionally `repeat-letter:<letters>`, default letters `ab`):
    prompt "Repeat the letter a."; label "a"; the reward is the fraction of the response's
    non-space characters that are the letter, over at least `REPEAT_LETTER_LENGTH` characters
    (so "a" alone scores 1/8 and "a a a a a a a a" scores 1). The signal is dense (every right
    token counts) and conditional (the letter comes from the prompt), so a random-init 2-layer,
    hidden-64 Llama learns it within ~60 GRPO steps on 2 CPU cores with two letters; more letters
    make it harder (four letters: mean reward ~0.75 after 200 steps).
    For conditional-sft the rows carry answers of every quality and their score (`scoreKey`):
    score s in 0..4 means 2s right letters then wrong ones, a repeat-letter reward of s/4.
    For prm the answer is 4 steps of one letter each, each labelled good when it is the letter.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rlhf_trainer.config import DataConfig
from rlhf_trainer.config.builtins import (
    CORPUS,
    REPEAT_LETTER,
    repeat_letter_letters,
    repeat_letter_row_count,
    split_builtin_name,
)

RowKind = Literal["prompt", "sft", "preference", "kto", "conditional", "prm", "text"]
Row = dict[str, Any]

REPEAT_LETTER_LENGTH = 8
# prm rows: an answer of this many steps (one letter each), each labelled right or wrong.
PRM_STEPS = 4
# conditional-sft rows are scored 0..CONDITIONAL_LEVELS (SteerLM's attribute scale).
CONDITIONAL_LEVELS = 4
# Special-token strings a decoder may leave in a response when it does not skip them.
_SPECIAL_STRINGS = ("</s>", "<s>", "<pad>", "<unk>", "<|assistant|>", "<|user|>", "<|system|>")


@dataclass(frozen=True)
class BuiltinTask:
    name: str
    summary: str
    rows: Callable[[str, str, int, RowKind, DataConfig], list[Row]]


def repeat_letter_prompt(letter: str) -> str:
    return f"Repeat the letter {letter}."


def repeat_letter_answer(letter: str) -> str:
    return " ".join([letter] * REPEAT_LETTER_LENGTH)


def scored_answer(letter: str, wrong: str, level: int) -> str:
    """conditional-sft rows: `2 * level` right letters then wrong ones (level 0..4), so the
    answer's repeat-letter reward is `level / 4`, the row's score."""
    right = level * REPEAT_LETTER_LENGTH // CONDITIONAL_LEVELS
    return " ".join([letter] * right + [wrong] * (REPEAT_LETTER_LENGTH - right))


def strip_special_strings(text: str) -> str:
    for special in _SPECIAL_STRINGS:
        text = text.replace(special, "")
    return text


def repeat_letter_score(response: str, letter: str) -> float:
    """Fraction of non-space characters equal to `letter`, over at least 8 characters."""
    chars = [c for c in strip_special_strings(response) if not c.isspace()]
    hits = sum(c == letter for c in chars)
    return hits / max(len(chars), REPEAT_LETTER_LENGTH)


def letter_from_prompt(prompt: str) -> str | None:
    """The target letter of a repeat-letter prompt (for reward calls without labels)."""
    marker = "Repeat the letter "
    at = prompt.rfind(marker)
    if at < 0 or len(prompt) <= at + len(marker):
        return None
    return prompt[at + len(marker)]


def _repeat_letter_rows(
    param: str, split: str, seed: int, kind: RowKind, cfg: DataConfig
) -> list[Row]:
    letters = repeat_letter_letters(param)
    count = repeat_letter_row_count(split)  # the config rules know it too
    # The split is part of the seed so train and eval rows differ.
    rng = random.Random(f"repeat-letter/{letters}/{split}/{seed}")
    rows: list[Row] = []
    for _ in range(count):
        letter = rng.choice(letters)
        wrong = rng.choice([c for c in letters if c != letter] or [chr(ord(letter) ^ 1)])
        row: Row = {cfg.input_key: repeat_letter_prompt(letter)}
        if kind == "prompt":
            row[cfg.label_key or "label"] = letter
        elif kind == "sft":
            row[cfg.output_key] = repeat_letter_answer(letter)
        elif kind == "preference":
            row[cfg.chosen_key] = repeat_letter_answer(letter)
            row[cfg.rejected_key] = repeat_letter_answer(wrong)
        elif kind == "conditional":
            right = rng.randrange(CONDITIONAL_LEVELS + 1)
            row[cfg.output_key] = scored_answer(letter, wrong, right)
            row[cfg.score_key] = right
        elif kind == "prm":
            steps = [letter if rng.random() < 0.5 else wrong for _ in range(PRM_STEPS)]
            row[cfg.steps_key] = steps
            row[cfg.step_labels_key] = [step == letter for step in steps]
        else:  # kto: unpaired answers, half of them right
            desirable = rng.random() < 0.5
            row[cfg.output_key] = repeat_letter_answer(letter if desirable else wrong)
            row[cfg.desirable_key] = desirable
        rows.append(row)
    return rows


def _corpus_rows(param: str, split: str, seed: int, kind: RowKind, cfg: DataConfig) -> list[Row]:
    if kind != "text":
        raise ValueError(
            "builtin corpus is pretraining text: use it in data.pretrain (PPO-ptx), not as "
            f"{kind} data"
        )
    from rlhf_trainer.models.tokenizer import bundled_corpus

    return [{cfg.pretrain_key: line} for line in bundled_corpus()]


BUILTIN_TASKS: dict[str, BuiltinTask] = {
    CORPUS: BuiltinTask(
        CORPUS, "the trainer's bundled English corpus, as pretraining text", _corpus_rows
    ),
    REPEAT_LETTER: BuiltinTask(
        REPEAT_LETTER,
        "repeat the letter named in the prompt (reward: fraction of right characters)",
        _repeat_letter_rows,
    ),
}


def builtin_rows(name: str, split: str, seed: int, kind: RowKind, cfg: DataConfig) -> list[Row]:
    base, param = split_builtin_name(name)
    task = BUILTIN_TASKS.get(base)
    if task is None:
        raise ValueError(
            f"data builtin {name!r} is unknown; available: {', '.join(sorted(BUILTIN_TASKS))}"
        )
    return task.rows(param, split, seed, kind, cfg)
