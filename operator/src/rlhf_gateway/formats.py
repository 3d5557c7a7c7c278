"""Which fine-tuning method a JSONL file serves, recognised from its first row, and every row
checked with the trainer's own row validators (`rlhf_trainer.config.finetune_files`: the
trainer reads the file with `data.format: openai` through the same rules).

OpenAI's rows: supervised `{"messages": [..., {"role": "assistant", ...}]}`, dpo
`{"input": {"messages": [...]}, "preferred_output": [...], "non_preferred_output": [...]}`,
reinforcement `{"messages": [... ending with the prompt], <any item fields>}`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlhf_trainer.config.finetune_files import FineTuneMethod, row_problems

from .errors import bad_request
from .files import Format


def row_format(row: dict[str, Any]) -> Format | None:
    if "preferred_output" in row or "non_preferred_output" in row or "input" in row:
        return "dpo"
    if "messages" not in row:
        return None
    messages = row["messages"]
    last = messages[-1] if isinstance(messages, list) and messages else None
    if isinstance(last, dict) and last.get("role") == "assistant":
        return "supervised"
    return "reinforcement"


def check_rows(rows: Iterable[tuple[int, dict[str, Any]]]) -> tuple[Format, int]:
    """The file's format and row count; 400 naming the line and the field of the first row
    that does not fit the format of the first."""
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
        problems = row_problems(FineTuneMethod(fmt), row)
        if problems:
            field, message = problems[0]
            where = f"line {number}: {field}: " if field else f"line {number}: "
            raise bad_request(f"file: {where}{message} ({fmt} file)", "file")
    if fmt is None:
        raise bad_request("file: no rows (the file is empty)", "file")
    return fmt, count
