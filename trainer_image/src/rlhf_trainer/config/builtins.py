"""Names of what the trainer ships built in, so a spec naming one is checked before it runs.

`data.train[].builtin` names a synthetic task (`rlhf_trainer.data.builtin`) and
`models.rewardFunction.builtin` its verifier (`rlhf_trainer.rewards.builtin`); a test keeps
these names equal to the trainer's registries. A name may carry a parameter after a colon:
`repeat-letter:abcd` (the letters to draw from). `corpus` is text to pretrain on (PPO-ptx).
"""

from __future__ import annotations

REPEAT_LETTER = "repeat-letter"
REPEAT_LETTER_DEFAULT = "ab"
# Pretraining text for PPO-ptx (`data.pretrain`): the trainer's bundled corpus.
CORPUS = "corpus"
BUILTIN_TASK_NAMES = (REPEAT_LETTER, CORPUS)
BUILTIN_REWARD_NAMES = (REPEAT_LETTER,)
# Rows of a repeat-letter data set: its "train" split, and any other split (e.g. "test").
REPEAT_LETTER_TRAIN_ROWS = 512
REPEAT_LETTER_OTHER_ROWS = 64


def split_builtin_name(name: str) -> tuple[str, str]:
    """`repeat-letter:abcd` -> ("repeat-letter", "abcd"); the parameter is optional."""
    base, _, param = name.partition(":")
    return base, param


def repeat_letter_letters(param: str) -> str:
    """The letters of `repeat-letter:<letters>`; raises ValueError for a bad parameter."""
    letters = param or REPEAT_LETTER_DEFAULT
    if not letters.isalpha() or len(set(letters)) != len(letters):
        raise ValueError(
            f"builtin repeat-letter:<letters> takes distinct letters, e.g. repeat-letter:abcd; "
            f"got {param!r}"
        )
    return letters


def builtin_problem(name: str, known: tuple[str, ...]) -> str | None:
    """Why `name` is not a usable builtin (None when it is)."""
    base, param = split_builtin_name(name)
    if base not in known:
        return f"{name!r} is unknown; available: {', '.join(sorted(known))}"
    if base == REPEAT_LETTER:
        try:
            repeat_letter_letters(param)
        except ValueError as err:
            return str(err)
    return None


def repeat_letter_row_count(split: str) -> int:
    return REPEAT_LETTER_TRAIN_ROWS if split == "train" else REPEAT_LETTER_OTHER_ROWS


def builtin_row_count(name: str, split: str) -> int | None:
    """Rows a builtin data set holds for `split`, known without generating it (None for
    `corpus`, whose size is the trainer's bundled file)."""
    if split_builtin_name(name)[0] != REPEAT_LETTER:
        return None
    return repeat_letter_row_count(split)
