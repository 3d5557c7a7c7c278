"""Prompt data: sources, chat template, truncation, mixing, deterministic and resumable order."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase

from rlhf_trainer.config import DataConfig
from rlhf_trainer.data.prompts import PromptItem, load_prompts
from rlhf_trainer.data.sources import DataLoadError
from rlhf_trainer.models.loading import load_tokenizer


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> PreTrainedTokenizerBase:
    return load_tokenizer(tiny_model_dir)


def data(**fields: Any) -> DataConfig:
    return DataConfig.model_validate(fields)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows(n: int, tag: str = "q") -> list[dict[str, Any]]:
    return [{"prompt": f"{tag}{i}", "answer": i} for i in range(n)]


def test_jsonl_prompts_get_the_chat_template_and_labels(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    write_jsonl(tmp_path / "p.jsonl", rows(3))
    ds = load_prompts(
        data(train=[{"path": "p.jsonl"}], labelKey="answer", shuffle=False), tok, tmp_path, 0
    )
    assert len(ds) == 3
    first = ds[0]
    assert first.prompt_text == "<s><|user|>\nq0</s>\n<|assistant|>\n"
    assert first.label == "0"  # labels reach reward functions as strings (JSON for non-strings)
    assert first.prompt_ids == tok(first.prompt_text, add_special_tokens=False).input_ids


def test_raw_prompts_and_chat_message_prompts(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    write_jsonl(tmp_path / "p.jsonl", [{"prompt": chat}])
    ds = load_prompts(data(train=[{"path": "p.jsonl"}]), tok, tmp_path, 0)
    assert ds[0].prompt_text == "<s><|system|>\nbe brief</s>\n<|user|>\nhi</s>\n<|assistant|>\n"
    write_jsonl(tmp_path / "raw.jsonl", [{"prompt": "plain text"}])
    raw = load_prompts(
        data(train=[{"path": "raw.jsonl"}], applyChatTemplate=False), tok, tmp_path, 0
    )
    assert raw[0].prompt_text == "plain text" and raw[0].label is None


def test_custom_chat_template_overrides_the_tokenizers(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    write_jsonl(tmp_path / "p.jsonl", [{"prompt": "hi"}])
    template = "Q: {{ messages[-1]['content'] }}\nA:"
    ds = load_prompts(data(train=[{"path": "p.jsonl"}], chatTemplate=template), tok, tmp_path, 0)
    assert ds[0].prompt_text == "Q: hi\nA:"


def test_long_prompts_keep_their_end(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    write_jsonl(tmp_path / "p.jsonl", [{"prompt": "word " * 50 + "the end"}])
    ds = load_prompts(data(train=[{"path": "p.jsonl"}], maxPromptLength=6), tok, tmp_path, 0)
    item = ds[0]
    assert len(item.prompt_ids) == 6
    assert item.prompt_text.endswith("<|assistant|>\n")
    assert tok(item.prompt_text, add_special_tokens=False).input_ids == item.prompt_ids


@pytest.mark.parametrize("fmt", ["jsonl", "json-list", "parquet", "directory"])
def test_file_formats(tmp_path: Path, tok: PreTrainedTokenizerBase, fmt: str) -> None:
    content = rows(4)
    if fmt == "jsonl":
        name = write_jsonl(tmp_path / "d.jsonl", content).name
    elif fmt == "json-list":
        (tmp_path / "d.json").write_text(json.dumps(content))
        name = "d.json"
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(content), tmp_path / "d.parquet")
        name = "d.parquet"
    else:
        (tmp_path / "dir").mkdir()
        write_jsonl(tmp_path / "dir" / "a.jsonl", content[:2])
        write_jsonl(tmp_path / "dir" / "b.jsonl", content[2:])
        (tmp_path / "dir" / "README.md").write_text("ignored")
        name = "dir"
    ds = load_prompts(data(train=[{"path": name}], shuffle=False), tok, tmp_path, 0)
    assert [i.prompt_text.split("\n")[1] for i in ds] == [f"q{n}</s>" for n in range(4)]


@pytest.mark.parametrize(
    ("setup", "cfg", "message"),
    [
        (None, {"train": [{"path": "missing.jsonl"}]}, "'missing.jsonl' does not exist"),
        ('[{"question": 1}]', {"train": [{"path": "d.json"}]}, "no column 'prompt'"),
        (
            '[{"prompt": "x"}]',
            {"train": [{"path": "d.json"}], "labelKey": "ans"},
            "no column 'ans'",
        ),
        ("{not json", {"train": [{"path": "d.jsonl"}]}, "d.jsonl:1: not a JSON object"),
        (None, {"train": [{"builtin": "nope"}]}, "builtin 'nope' is unknown; available"),
        (None, {"train": [{"hfId": "org/ds"}]}, "hfId 'org/ds'"),
        ('[{"prompt": 3}]', {"train": [{"path": "d.json"}]}, "must be a string or a list"),
    ],
    ids=[
        "missing-path",
        "missing-input-column",
        "missing-label-column",
        "bad-jsonl",
        "unknown-builtin",
        "hf-unavailable",
        "bad-prompt-type",
    ],
)
def test_errors_name_the_problem(
    tmp_path: Path,
    tok: PreTrainedTokenizerBase,
    setup: str | None,
    cfg: dict[str, Any],
    message: str,
) -> None:
    if setup is not None:
        (tmp_path / "d.json").write_text(setup)
        (tmp_path / "d.jsonl").write_text(setup)
    with pytest.raises(DataLoadError, match=message):
        load_prompts(data(**cfg), tok, tmp_path, 0)


def test_mixing_follows_probabilities_and_max_samples(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    write_jsonl(tmp_path / "a.jsonl", rows(30, "a"))
    write_jsonl(tmp_path / "b.jsonl", rows(10, "b"))
    cfg = data(
        train=[{"path": "a.jsonl", "probability": 0.25}, {"path": "b.jsonl", "probability": 0.75}],
        maxSamples=20,
    )
    ds = load_prompts(cfg, tok, tmp_path, 0)
    origin = Counter(item.prompt_text.split("\n")[1][0] for item in ds)
    # 20 + 10 rows after the cap; a gets 25 % of them, b 75 % (b's 10 rows repeat).
    assert origin == {"a": 8, "b": 22}


def test_order_is_seeded_and_resumable(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    write_jsonl(tmp_path / "p.jsonl", rows(10))
    cfg = data(train=[{"path": "p.jsonl"}])

    def texts(items: list[PromptItem]) -> list[str]:
        return [i.prompt_text for i in items]

    a, b = load_prompts(cfg, tok, tmp_path, 1), load_prompts(cfg, tok, tmp_path, 1)
    assert texts(list(a)) == texts(list(b))
    assert texts(list(a)) != texts(list(load_prompts(cfg, tok, tmp_path, 2)))
    straight = [batch for batch in a.batches(3, passes=2)]
    assert len(straight) == a.num_batches(3, passes=2) == 6
    assert [batch.position for batch in straight] == [3, 6, 9, 12, 15, 18]
    resumed = list(b.batches(3, start=straight[2].position, passes=2))
    assert [texts(x.items) for x in resumed] == [texts(x.items) for x in straight[3:]]
    # The second pass is a different order of the same prompts.
    first_pass = [a.at(p).prompt_text for p in range(10)]
    second_pass = [a.at(p).prompt_text for p in range(10, 20)]
    assert sorted(first_pass) == sorted(second_pass) and first_pass != second_pass


def test_builtin_task_prompts(tok: PreTrainedTokenizerBase) -> None:
    cfg = data(train=[{"builtin": "repeat-letter"}], labelKey="label")
    ds = load_prompts(cfg, tok, Path("."), 0)
    assert len(ds) == 512
    assert {i.label for i in ds} == {"a", "b"}
    assert all(f"Repeat the letter {i.label}." in i.prompt_text for i in ds)
    evals = load_prompts(
        data(
            train=[{"builtin": "repeat-letter"}],
            eval=[{"builtin": "repeat-letter:abcd", "split": "test"}],
            labelKey="label",
        ),
        tok,
        Path("."),
        0,
        which="eval",
    )
    assert len(evals) == 64 and {i.label for i in evals} == set("abcd")
