"""SFT, preference and KTO samples: prompt/response ids kept apart, eos-terminated, capped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase

from rlhf_trainer.config import DataConfig
from rlhf_trainer.data.offline import load_kto, load_preferences, load_sft
from rlhf_trainer.data.sources import DataLoadError
from rlhf_trainer.models.loading import load_tokenizer


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> PreTrainedTokenizerBase:
    return load_tokenizer(tiny_model_dir)


def data(**fields: Any) -> DataConfig:
    return DataConfig.model_validate({"shuffle": False, **fields})


def write(tmp_path: Path, rows: list[dict[str, Any]]) -> None:
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_sft_item_masks_the_prompt_and_ends_with_eos(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    write(tmp_path, [{"prompt": "hi", "response": "hello there"}])
    item = load_sft(data(train=[{"path": "d.jsonl"}]), tok, tmp_path, 0)[0]
    assert tok.decode(item.prompt_ids) == "<s><|user|>\nhi</s>\n<|assistant|>\n"
    assert tok.decode(item.response_ids) == "hello there</s>"
    assert item.input_ids == item.prompt_ids + item.response_ids
    assert item.loss_mask == [0] * len(item.prompt_ids) + [1] * len(item.response_ids)


def test_responses_are_cut_to_max_length(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    write(tmp_path, [{"prompt": "hi", "response": "word " * 40}])
    item = load_sft(data(train=[{"path": "d.jsonl"}], maxLength=12), tok, tmp_path, 0)[0]
    assert len(item.input_ids) == 12


def test_preferences_from_strings_and_chats(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "good"}]
    write(
        tmp_path,
        [
            {"prompt": "hi", "chosen": "good", "rejected": "bad"},
            {"prompt": "hi", "chosen": chat, "rejected": "bad"},
        ],
    )
    ds = load_preferences(data(train=[{"path": "d.jsonl"}]), tok, tmp_path, 0)
    assert ds[0] == ds[1]
    assert tok.decode(ds[0].chosen_ids) == "good</s>"
    assert tok.decode(ds[0].rejected_ids) == "bad</s>"


@pytest.mark.parametrize(
    ("flag", "expected"),
    [(True, True), (0, False), ("true", True), ("0", False)],
    ids=["bool", "int", "str-true", "str-0"],
)
def test_kto_desirable_flag(
    tmp_path: Path, tok: PreTrainedTokenizerBase, flag: Any, expected: bool
) -> None:
    write(tmp_path, [{"prompt": "hi", "response": "ok", "label": flag}])
    assert load_kto(data(train=[{"path": "d.jsonl"}]), tok, tmp_path, 0)[0].desirable is expected


def test_kto_bad_flag_names_the_column(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    write(tmp_path, [{"prompt": "hi", "response": "ok", "label": "maybe"}])
    with pytest.raises(DataLoadError, match=r"'label' \(data.desirableKey\) must be a boolean"):
        load_kto(data(train=[{"path": "d.jsonl"}]), tok, tmp_path, 0)


def test_builtin_task_serves_every_offline_kind(tok: PreTrainedTokenizerBase) -> None:
    cfg = data(train=[{"builtin": "repeat-letter"}])
    sft = load_sft(cfg, tok, Path("."), 0)
    prefs = load_preferences(cfg, tok, Path("."), 0)
    kto = load_kto(cfg, tok, Path("."), 0)
    assert len(sft) == len(prefs) == len(kto) == 512
    first = tok.decode(sft[0].prompt_ids)
    letter = first.split("Repeat the letter ")[1][0]
    assert tok.decode(sft[0].response_ids) == " ".join([letter] * 8) + "</s>"
    assert prefs[0].chosen_ids != prefs[0].rejected_ids
    assert {k.desirable for k in kto} == {True, False}
