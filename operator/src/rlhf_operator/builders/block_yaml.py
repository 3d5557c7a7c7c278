"""Block-style YAML for plain data, byte for byte what PyYAML writes, without its representer.

`yaml.dump(data, sort_keys=False, default_flow_style=False)` walks every value through
PyYAML's representer, serializer and path resolvers, pure Python even with libyaml's emitter:
most of the CPU of rendering a job's `job.yaml`, which every new job needs. This writes the
same text directly for the data a job config holds (mappings with string keys, lists, strings,
numbers, booleans, nulls) and gives up, returning None, on anything whose PyYAML text it does
not reproduce with certainty: then the caller dumps with PyYAML. What it reproduces:

- PyYAML's layout: two-space indentation, a list under a key not indented (`key:` then `- a`),
  a mapping in a list item started on the dash's line, `{}` and `[]` for empty containers;
- a string written plain when PyYAML would: only printable ASCII, no character that starts or
  breaks a plain scalar where it stands, and not a text PyYAML's loader would read back as
  another type (asked of PyYAML's own implicit resolvers); else single-quoted when it has no
  space (PyYAML's next choice there). A string with spaces is written plain only when its line
  ends before PyYAML's width of 80 columns (beyond it PyYAML folds at a space); anything else
  (double quotes, escapes, folding, long keys) is left to PyYAML.
- numbers as PyYAML's representer writes them (`repr`, `.inf`, `1.0e-05`).

The tests hold it to PyYAML's own output on random data and on every bundled example.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Any

import yaml.resolver

# PyYAML folds a line at a space past this column (its emitter's default best_width).
_WIDTH = 80
# A key this long or longer is not a simple key for PyYAML (written as `? key`).
_SIMPLE_KEY_MAX = 128
_IMPLICIT = yaml.resolver.Resolver.yaml_implicit_resolvers
_ASCII = re.compile(r"[\x20-\x7e\n]*")


def _reads_as_string(text: str) -> bool:
    """PyYAML's loader reads `text`, written plain, back as a string (not a bool, number,
    null, timestamp, merge or value key): its implicit resolvers, by first character."""
    for _tag, pattern in (*_IMPLICIT.get(text[:1], ()), *_IMPLICIT.get(None, ())):
        if pattern.match(text):
            return False
    return True


def _block_indicator(text: str) -> bool:
    """PyYAML's emitter finds an indicator in `text` that forbids it plain in a block (its
    `analyze_scalar`, for printable ASCII without line breaks)."""
    if text.startswith(("---", "...")):
        return True
    first = text[0]
    if first in "#,[]{}&*!|>'\"%@`":
        return True
    if first in "?:-" and text[1:2] in ("", " "):
        return True
    return ": " in text[1:] or (len(text) > 1 and text.endswith(":")) or " #" in text


# A job config's strings are mostly the same from job to job (defaults, model ids, images).
@functools.lru_cache(maxsize=8192)
def _string(text: str, column: int, key: bool, indent: int) -> str | None:
    """The string as PyYAML writes it starting at `column` (lines after a break indented by
    `indent`), or None where unsure."""
    if not text:
        return "''"
    if key and len(text) >= _SIMPLE_KEY_MAX:
        return None  # PyYAML writes `? key`
    if not _ASCII.fullmatch(text):
        return None  # escapes, tabs, non-ASCII: double quotes
    if "\n" in text:
        if key or " " in text:
            return None  # a multi-line key; spaces beside breaks (double quotes), folding
        # Single quotes; a run of breaks is written with one break more, then the indent.
        quoted = text.replace("'", "''")
        lines = re.sub(r"\n+", lambda run: "\n" * (len(run[0]) + 1) + " " * indent, quoted)
        return "'" + lines + "'"
    if text[0] == " " or text[-1] == " ":
        plain = False
    else:
        plain = not _block_indicator(text) and _reads_as_string(text)
    quoted = text if plain else "'" + text.replace("'", "''") + "'"
    if " " in text and not key and column + len(quoted) > _WIDTH:
        return None  # PyYAML would fold it at a space
    return quoted


def _scalar(value: Any, column: int, indent: int, key: bool = False) -> str | None:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value).lower()
        if "." not in text and "e" in text:
            text = text.replace("e", ".0e", 1)
        return text
    if type(value) is str:
        return _string(value, column, key, indent)
    return None


class _Unsure(Exception):
    """A value PyYAML might write otherwise: the whole document is left to PyYAML."""


def _inline(value: Any, column: int, indent: int) -> str:
    """A value that fits after `key: ` or `- `: a scalar or an empty container."""
    if isinstance(value, Mapping) and not value:
        return "{}"
    if isinstance(value, list) and not value:
        return "[]"
    text = _scalar(value, column, indent)
    if text is None:
        raise _Unsure
    return text


def _is_block(value: Any) -> bool:
    return isinstance(value, (Mapping, list)) and bool(value)


def _mapping(data: Mapping[Any, Any], indent: int, out: list[str], first_prefix: str) -> None:
    """Each `key: value` at `indent`; the first line starts with `first_prefix` instead of
    the indentation (a mapping inside a list item starts on the dash's line)."""
    prefix = first_prefix
    for key, value in data.items():
        if type(key) is not str:
            raise _Unsure
        key_text = _string(key, indent, True, indent)
        if key_text is None:
            raise _Unsure
        if _is_block(value):
            out.append(f"{prefix}{key_text}:\n")
            if isinstance(value, list):
                _sequence(value, indent, out)  # PyYAML does not indent a list under a key
            else:
                _mapping(value, indent + 2, out, " " * (indent + 2))
        else:
            column = indent + len(key_text) + 2
            out.append(f"{prefix}{key_text}: {_inline(value, column, indent + 2)}\n")
        prefix = " " * indent


def _sequence(data: list[Any], indent: int, out: list[str]) -> None:
    dash = " " * indent + "- "
    for item in data:
        _item(item, indent, out, dash)


def _item(item: Any, indent: int, out: list[str], dash: str) -> None:
    if isinstance(item, Mapping) and item:
        _mapping(item, indent + 2, out, dash)
    elif isinstance(item, list) and item:
        # A list in a list starts on the dash's line too: `- - a`.
        inner = dash + "- "
        for index, sub in enumerate(item):
            _item(sub, indent + 2, out, inner if index == 0 else " " * (indent + 2) + "- ")
    else:
        out.append(f"{dash}{_inline(item, len(dash), len(dash))}\n")


def dump_block(data: Any) -> str | None:
    """`data` as `yaml.dump(data, sort_keys=False, default_flow_style=False)` writes it, or
    None where this writer is not sure to match it (the caller asks PyYAML then)."""
    out: list[str] = []
    try:
        if isinstance(data, Mapping) and data:
            _mapping(data, 0, out, "")
        elif isinstance(data, list) and data:
            _sequence(data, 0, out)
        else:
            return None  # a lone scalar: PyYAML adds document markers; not a job config
    except _Unsure:
        return None
    return "".join(out)
