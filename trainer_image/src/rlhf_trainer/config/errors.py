"""Turn pydantic errors into one line per problem: `<field path>: <what is wrong>`."""

from __future__ import annotations

from pydantic import ValidationError

from .base import CROSS_FIELD_ERROR
from .documents import quote
from .graders import strip_grader_tags
from .names import DESCRIPTIONS

# A line names a field and says why in a sentence: anything longer quotes a hostile value.
MAX_LINE = 600


def _join(parts: list[str]) -> str:
    out = ""
    for part in parts:
        part = part if len(part) <= 64 else quote(part, 64)  # a map key of a hostile size
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


def _capped(line: str) -> str:
    return line if len(line) <= MAX_LINE else f"{line[:MAX_LINE]}... (message cut)"


def _plain_message(err: dict[str, object]) -> str:
    msg = str(err["msg"])
    # pydantic prefixes messages raised from validators with "Value error, ".
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if err["type"] == "extra_forbidden":
        return "unknown field (check the spelling; fields are camelCase)"
    if err["type"] == "missing":
        return "required field is missing"
    value = err.get("input")
    if err["type"] == "string_pattern_mismatch":
        ctx = err.get("ctx")
        pattern = str(ctx.get("pattern", "")) if isinstance(ctx, dict) else ""
        if pattern in DESCRIPTIONS:
            return f"must be {DESCRIPTIONS[pattern]}; got {quote(value)}"
        return f"{msg}; got {quote(value)}"
    if err["type"] in {"enum", "literal_error"} or "greater" in msg or "less" in msg:
        return f"{msg} (got {quote(value)})"
    return msg


def validation_messages(error: ValidationError, prefix: str = "") -> list[str]:
    """One `path: message` line per problem, paths in the manifest's camelCase spelling."""
    lines: list[str] = []
    for err in error.errors():
        loc = [str(p) for p in err["loc"]]
        # Union branches show up as extra loc parts named after the type; drop them.
        loc = [p for p in loc if not p.startswith("function-") and p not in {"str", "int"}]
        # A grader's type tag (models.graderReward.grader.python.source -> grader.source).
        loc = strip_grader_tags(loc)
        base = _join(([prefix] if prefix else []) + loc)
        ctx = err.get("ctx") or {}
        if err["type"] == CROSS_FIELD_ERROR and "problems" in ctx:
            for path, message in ctx["problems"]:
                where = ".".join(x for x in (base, path) if x)
                lines.append(_capped(f"{where}: {message}"))
            continue
        lines.append(_capped(f"{base or '<root>'}: {_plain_message(dict(err))}"))
    return lines
