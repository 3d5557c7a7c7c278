"""`data.format: openai`: OpenAI's fine-tuning JSONL read by the trainer's loaders, for sft
(supervised), dpo (preferences) and the online algorithms (reinforcement, whose rows reach a
grader as `item`); a bad row is refused with its number and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase

from rlhf_trainer.config import DataConfig
from rlhf_trainer.data.offline import load_preferences, load_sft
from rlhf_trainer.data.prompts import load_prompts
from rlhf_trainer.data.sources import DataLoadError
from rlhf_trainer.models.loading import load_tokenizer


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> PreTrainedTokenizerBase:
    return load_tokenizer(tiny_model_dir)


def openai_data(tmp_path: Path, rows: list[dict[str, Any]]) -> DataConfig:
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return DataConfig.model_validate(
        {"format": "openai", "train": [{"path": "rows.jsonl"}], "shuffle": False}
    )


def test_reinforcement_rows_are_prompts_and_whole_rows_are_items(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    row = {"messages": [{"role": "user", "content": "q0"}], "letter": "a", "meta": {"n": 1}}
    ds = load_prompts(openai_data(tmp_path, [row]), tok, tmp_path, 0)
    assert ds[0].prompt_text == "<s><|user|>\nq0</s>\n<|assistant|>\n"
    assert ds[0].item == row


def test_supervised_rows_learn_the_last_assistant_message(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    row = {
        "messages": [
            {"role": "user", "content": "q0"},
            {"role": "assistant", "content": "a a"},
        ]
    }
    item = load_sft(openai_data(tmp_path, [row]), tok, tmp_path, 0)[0]
    prompt = tok("<s><|user|>\nq0</s>\n<|assistant|>\n", add_special_tokens=False).input_ids
    assert item.prompt_ids == prompt
    assert item.response_ids == [*tok("a a", add_special_tokens=False).input_ids, tok.eos_token_id]


def test_dpo_rows_are_preferences(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    row = {
        "input": {"messages": [{"role": "user", "content": "q0"}]},
        "preferred_output": [{"role": "assistant", "content": "a a"}],
        "non_preferred_output": [{"role": "assistant", "content": "b"}],
    }
    item = load_preferences(openai_data(tmp_path, [row]), tok, tmp_path, 0)[0]
    assert item.chosen_ids[:-1] == tok("a a", add_special_tokens=False).input_ids
    assert item.rejected_ids[:-1] == tok("b", add_special_tokens=False).input_ids


def test_a_bad_row_is_refused_with_its_number_and_field(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    good = {"messages": [{"role": "user", "content": "q"}]}
    bad = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x"}]}
    with pytest.raises(
        DataLoadError,
        match=r"row 2 is not OpenAI's reinforcement format: "
        r"messages\[1\]\.role: the prompt must not end",
    ):
        load_prompts(openai_data(tmp_path, [good, bad]), tok, tmp_path, 0)
