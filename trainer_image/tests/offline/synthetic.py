"""Tiny synthetic data sets the offline trainers must learn (written as JSONL files).

- SFT: every prompt has the same answer, so the response loss can approach zero.
- Preferences / KTO: a vocabulary preference that needs no reasoning about the prompt: good
  responses are words of the letters a-m, bad ones of n-z, of random lengths (so length is no
  cue). A reward model has to read the response to score it at its last token; DPO and KTO have
  to move probability from the bad letters to the good ones.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any

GOOD_LETTERS = string.ascii_lowercase[:13]
BAD_LETTERS = string.ascii_lowercase[13:]
FIXED_ANSWER = "the answer is always the same"
TOPICS = ("cats", "rain", "maps", "tea", "boats", "songs", "snow", "bread")


def _prompt(rng: random.Random) -> str:
    return f"Tell me about {rng.choice(TOPICS)}."


def _response(rng: random.Random, letters: str) -> str:
    words = rng.randint(3, 6)
    return " ".join(
        "".join(rng.choice(letters) for _ in range(rng.randint(2, 4))) for _ in range(words)
    )


def sft_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"prompt": _prompt(rng), "response": FIXED_ANSWER} for _ in range(count)]


def preference_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "prompt": _prompt(rng),
            "chosen": _response(rng, GOOD_LETTERS),
            "rejected": _response(rng, BAD_LETTERS),
        }
        for _ in range(count)
    ]


def kto_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        desirable = i % 2 == 0
        letters = GOOD_LETTERS if desirable else BAD_LETTERS
        rows.append(
            {"prompt": _prompt(rng), "response": _response(rng, letters), "label": desirable}
        )
    rng.shuffle(rows)
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
