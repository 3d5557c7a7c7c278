"""OpenAI's fine-tuning JSONL formats: each method's row validator names the line and the field
of every problem; valid rows become the trainer's columns."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlhf_trainer.config.finetune_files import (
    FineTuneMethod,
    file_problems,
    row_problems,
    training_columns,
)

SUPERVISED = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Repeat a."},
        {"role": "assistant", "content": "a a a"},
    ]
}
DPO = {
    "input": {"messages": [{"role": "user", "content": "Repeat a."}]},
    "preferred_output": [{"role": "assistant", "content": "a a a"}],
    "non_preferred_output": [{"role": "assistant", "content": "b"}],
}
REINFORCEMENT = {
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Repeat a."}]}],
    "letter": "a",
    "meta": {"level": 1},
}
M = FineTuneMethod


@pytest.mark.parametrize(
    ("method", "row"),
    [(M.SUPERVISED, SUPERVISED), (M.DPO, DPO), (M.REINFORCEMENT, REINFORCEMENT)],
    ids=["supervised", "dpo", "reinforcement"],
)
def test_valid_rows_pass(method: FineTuneMethod, row: dict[str, Any]) -> None:
    assert row_problems(method, row) == []


@pytest.mark.parametrize(
    ("method", "row", "field", "why"),
    [
        (M.SUPERVISED, {}, "messages", "must be a non-empty list"),
        (M.SUPERVISED, {"messages": []}, "messages", "must be a non-empty list"),
        (
            M.SUPERVISED,
            {"messages": [{"role": "user", "content": "x"}]},
            "messages",
            "at least one assistant",
        ),
        (
            M.SUPERVISED,
            {"messages": [{"role": "bot", "content": "x"}]},
            "messages[0].role",
            "must be one of",
        ),
        (M.SUPERVISED, {"messages": [{"role": "user"}]}, "messages[0].content", "required field"),
        (
            M.SUPERVISED,
            {"messages": [{"role": "user", "content": 3}]},
            "messages[0].content",
            "string",
        ),
        (
            M.SUPERVISED,
            {"messages": [{"role": "assistant", "content": "x", "weight": 2}]},
            "messages[0].weight",
            "0 or 1",
        ),
        (
            M.SUPERVISED,
            {"messages": [{"role": "user", "content": [{"type": "image"}]}]},
            "messages[0].content[0]",
            "text",
        ),
        (M.DPO, {**DPO, "input": []}, "input", "must be an object"),
        (M.DPO, {**DPO, "input": {"messages": "x"}}, "input.messages", "non-empty list"),
        (
            M.DPO,
            {k: v for k, v in DPO.items() if k != "preferred_output"},
            "preferred_output",
            "non-empty",
        ),
        (
            M.DPO,
            {**DPO, "non_preferred_output": [{"role": "user", "content": "b"}]},
            "non_preferred_output[0].role",
            "must be one of assistant",
        ),
        (
            M.DPO,
            {**DPO, "preferred_output": [{"role": "assistant", "content": "a"}] * 2},
            "preferred_output",
            "exactly one",
        ),
        (M.REINFORCEMENT, {"letter": "a"}, "messages", "non-empty list"),
        (
            M.REINFORCEMENT,
            {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
            "messages[1].role",
            "must not end with an assistant",
        ),
        (M.REINFORCEMENT, ["not", "an", "object"], "", "JSON object"),
    ],
)
def test_bad_rows_name_the_field(method: FineTuneMethod, row: Any, field: str, why: str) -> None:
    found = row_problems(method, row)
    assert any(f == field and why in w for f, w in found), found


def test_file_problems_name_the_line() -> None:
    lines = [
        json.dumps(SUPERVISED),
        "",
        "{not json",
        json.dumps({"messages": [{"role": "user", "content": "x"}]}),
    ]
    found = [p.render() for p in file_problems(M.SUPERVISED, lines)]
    assert found[0].startswith("line 3: is not valid JSON")
    assert (
        found[1]
        == "line 4, field messages: needs at least one assistant message (what the model learns)"
    )
    assert len(found) == 2


def test_file_problems_stop_at_the_limit_and_refuse_an_empty_file() -> None:
    bad = [b"[]"] * 50
    assert len(list(file_problems(M.DPO, bad, limit=5))) == 5
    assert [p.render() for p in file_problems(M.DPO, [b"", b"  "])] == [
        "line 1: the file holds no rows"
    ]


def test_valid_rows_become_the_trainers_columns() -> None:
    assert training_columns(M.SUPERVISED, SUPERVISED) == {
        "prompt": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Repeat a."},
        ],
        "response": "a a a",
    }
    assert training_columns(M.DPO, DPO) == {
        "prompt": [{"role": "user", "content": "Repeat a."}],
        "chosen": "a a a",
        "rejected": "b",
    }
    assert training_columns(M.REINFORCEMENT, REINFORCEMENT) == {
        "prompt": [{"role": "user", "content": "Repeat a."}]
    }
