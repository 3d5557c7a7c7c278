"""OpenAI's fine-tuning JSONL formats, one validator per method (pure: the gateway checks
uploads with them, the trainer reads `data.format: openai` files through them).

- supervised: `{"messages": [...]}` with at least one assistant message; the trainer learns
  the last assistant message, the messages before it are its prompt.
- dpo: `{"input": {"messages": [...]}, "preferred_output": [{"role": "assistant", ...}],
  "non_preferred_output": [...]}`.
- reinforcement: `{"messages": [...], <any other fields>}`: the messages are the prompt (they
  must not end with an assistant message), every field of the row is a grader's `item`.

A message is `{"role", "content"}`; content is a string or a list of `{"type": "text",
"text"}` parts. `row_problems(method, row)` lists `(field, why)`; `file_problems` adds the
line number for each.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class FineTuneMethod(StrEnum):
    SUPERVISED = "supervised"
    DPO = "dpo"
    REINFORCEMENT = "reinforcement"


ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_LINE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class FileProblem:
    """One bad line: its number (from 1), the field in it, and why."""

    line: int
    field: str
    message: str

    def render(self) -> str:
        where = f"line {self.line}" + (f", field {self.field}" if self.field else "")
        return f"{where}: {self.message}"


def message_text(content: Any) -> str:
    """A message's content as text (the text parts of a list joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _content_problems(content: Any, where: str) -> list[tuple[str, str]]:
    if isinstance(content, str):
        return []
    if isinstance(content, list) and content:
        for i, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text"):
                return [(f"{where}[{i}]", 'a content part must be {"type": "text", "text": ...}')]
            if not isinstance(part.get("text"), str):
                return [(f"{where}[{i}].text", "must be a string")]
        return []
    return [(where, "must be a string or a non-empty list of text parts")]


def messages_problems(
    messages: Any, where: str, *, roles: Iterable[str] = ROLES
) -> list[tuple[str, str]]:
    allowed = tuple(roles)
    if not isinstance(messages, list) or not messages:
        return [(where, "must be a non-empty list of messages")]
    out: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        at = f"{where}[{i}]"
        if not isinstance(message, dict):
            out.append((at, "a message must be an object with role and content"))
            continue
        role = message.get("role")
        if role not in allowed:
            out.append((f"{at}.role", f"must be one of {', '.join(allowed)}; got {role!r}"))
        if "content" not in message:
            if not (role == "assistant" and message.get("tool_calls")):
                out.append((f"{at}.content", "required field is missing"))
        elif message["content"] is not None:
            out += _content_problems(message["content"], f"{at}.content")
        weight = message.get("weight")
        if weight is not None and weight not in (0, 1):
            out.append((f"{at}.weight", f"must be 0 or 1; got {weight!r}"))
    return out


def _supervised(row: dict[str, Any]) -> list[tuple[str, str]]:
    out = messages_problems(row.get("messages"), "messages")
    if not out and not any(m.get("role") == "assistant" for m in row["messages"]):
        out.append(("messages", "needs at least one assistant message (what the model learns)"))
    return out


def _outputs(value: Any, where: str) -> list[tuple[str, str]]:
    out = messages_problems(value, where, roles=("assistant",))
    if not out and len(value) != 1:
        out.append((where, f"must hold exactly one assistant message; got {len(value)}"))
    return out


def _dpo(row: dict[str, Any]) -> list[tuple[str, str]]:
    source = row.get("input")
    if not isinstance(source, dict):
        out = [("input", "must be an object with messages")]
    else:
        out = messages_problems(source.get("messages"), "input.messages")
    out += _outputs(row.get("preferred_output"), "preferred_output")
    out += _outputs(row.get("non_preferred_output"), "non_preferred_output")
    return out


def _reinforcement(row: dict[str, Any]) -> list[tuple[str, str]]:
    out = messages_problems(row.get("messages"), "messages")
    if not out and row["messages"][-1].get("role") == "assistant":
        out.append(
            (
                f"messages[{len(row['messages']) - 1}].role",
                "the prompt must not end with an assistant message: the model writes it",
            )
        )
    return out


_CHECKS = {
    FineTuneMethod.SUPERVISED: _supervised,
    FineTuneMethod.DPO: _dpo,
    FineTuneMethod.REINFORCEMENT: _reinforcement,
}


def row_problems(method: FineTuneMethod, row: Any) -> list[tuple[str, str]]:
    """(field, why) for each problem of one row of `method`'s format."""
    if not isinstance(row, dict):
        return [("", f"a line must be a JSON object; got {type(row).__name__}")]
    return _CHECKS[method](row)


def file_problems(
    method: FineTuneMethod, lines: Iterable[str | bytes], *, limit: int = 20
) -> Iterator[FileProblem]:
    """The problems of a JSONL file, line by line (blank lines are skipped), at most `limit`;
    a file with no rows is one problem on line 1."""
    found = rows = 0
    for number, raw in enumerate(lines, start=1):
        if found >= limit:
            return
        if len(raw) > MAX_LINE_BYTES:
            found += 1
            yield FileProblem(number, "", f"is longer than {MAX_LINE_BYTES} bytes")
            continue
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        rows += 1
        try:
            row = json.loads(text)
        except ValueError as err:
            found += 1
            yield FileProblem(number, "", f"is not valid JSON: {err}")
            continue
        for field, why in row_problems(method, row)[: limit - found]:
            found += 1
            yield FileProblem(number, field, why)
    if rows == 0 and found == 0:
        yield FileProblem(1, "", "the file holds no rows")


def _chat(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"role": str(m["role"]), "content": message_text(m.get("content"))} for m in messages]


def training_columns(method: FineTuneMethod, row: dict[str, Any]) -> dict[str, Any]:
    """A valid row of `method`'s format as the trainer's columns: `prompt` (chat messages),
    and `response` (supervised: the last assistant message) or `chosen`/`rejected` (dpo).
    A reinforcement row's other fields stay where they are: they are the grader's item."""
    if method is FineTuneMethod.SUPERVISED:
        messages = row["messages"]
        last = max(i for i, m in enumerate(messages) if m.get("role") == "assistant")
        return {
            "prompt": _chat(messages[:last]),
            "response": message_text(messages[last].get("content")),
        }
    if method is FineTuneMethod.DPO:
        return {
            "prompt": _chat(row["input"]["messages"]),
            "chosen": message_text(row["preferred_output"][0].get("content")),
            "rejected": message_text(row["non_preferred_output"][0].get("content")),
        }
    return {"prompt": _chat(row["messages"])}
