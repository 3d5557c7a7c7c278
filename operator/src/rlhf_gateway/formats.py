"""Which fine-tuning method a JSONL file serves, recognised from its rows (pure).

OpenAI's rows: supervised `{"messages": [..., {"role": "assistant", ...}]}`, dpo
`{"input": {"messages": [...]}, "preferred_output": [...], "non_preferred_output": [...]}`,
reinforcement `{"messages": [... ending with the user's turn], <any item fields>}`. The first
row decides; every row must then be of that kind. Field-level checks of a row belong to the
trainer's row validators (`rlhf_trainer.config`), which read the same files.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import bad_request
from .files import Format

_DPO_KEYS = ("input", "preferred_output", "non_preferred_output")


def row_format(row: dict[str, Any]) -> Format | None:
    if "preferred_output" in row or "non_preferred_output" in row:
        return "dpo"
    if "messages" not in row:
        return None
    messages = row["messages"]
    last = messages[-1] if isinstance(messages, list) and messages else None
    if isinstance(last, dict) and last.get("role") == "assistant":
        return "supervised"
    return "reinforcement"


def _row_problem(fmt: Format, row: dict[str, Any]) -> tuple[str, str] | None:
    """(field, what is wrong) for a row that is not of the file's kind."""
    if fmt == "dpo":
        for key in _DPO_KEYS:
            if key not in row:
                return key, "required field is missing (a dpo row has input, preferred_output "
                "and non_preferred_output)"
        return None
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages", "required: a non-empty list of {role, content} messages"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            return f"messages[{i}]", "each message needs a role (system, user, assistant)"
    if row_format(row) != fmt:
        if fmt == "supervised":
            return f"messages[{len(messages) - 1}]", "the last message must be the assistant's"
        return f"messages[{len(messages) - 1}]", (
            "a reinforcement row ends with the prompt (no assistant answer: the model writes it)"
        )
    return None


def check_rows(rows: Iterable[tuple[int, dict[str, Any]]]) -> tuple[Format, int]:
    """The file's format and row count; 400 naming the line and the field of the first row
    that does not fit."""
    fmt: Format | None = None
    count = 0
    for number, row in rows:
        count += 1
        if fmt is None:
            fmt = row_format(row)
            if fmt is None:
                raise bad_request(
                    f"file: line {number}: not a fine-tuning row: expected 'messages' "
                    "(supervised, reinforcement) or 'input'/'preferred_output'/"
                    "'non_preferred_output' (dpo)",
                    "file",
                )
        problem = _row_problem(fmt, row)
        if problem is not None:
            field, message = problem
            raise bad_request(f"file: line {number}: {field}: {message} ({fmt} file)", "file")
    if fmt is None:
        raise bad_request("file: no rows (the file is empty)", "file")
    return fmt, count
