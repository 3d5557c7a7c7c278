"""Parse manifest files so that no file can crash or exhaust the reader.

A manifest is untrusted text (a GitOps repository, a tenant's upload), and it is read by
`rlhf validate`, `rlhf run`, `rlhf-operator render` and the trainer. YAML as such can crash a
naive reader: a document nested thousands of levels deep (RecursionError in the composer), an
integer of thousands of digits (Python refuses to convert it), an alias bomb (a few lines that
expand to billions of nodes). Here a file is read with bounds, and refused with one line when
it exceeds them:

- at most `MAX_FILE_BYTES` (a request body the API server takes is at most 3 MiB per object);
- nesting at most `MAX_DEPTH` levels (our schema is a dozen deep; libyaml stops at 1000);
- aliases are allowed (kubectl takes them) but the document as expanded holds at most
  `MAX_NODES` nodes, counted on the event stream before anything is built;
- duplicate keys in a mapping are refused, as kubectl refuses them;
- integers longer than any 64-bit integer are read as out of range (`document_problems` then
  names their field), never converted digit by digit.

`document_problems` walks a parsed document for what JSON, and so Kubernetes, cannot store:
integers outside 64 bits, infinities and NaN. The C loader (libyaml) is used where PyYAML was
built with it: 10-30x faster than the pure-Python one on large specs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 200_000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Longer digit strings are beyond int64 whatever they say (and Python's int() refuses beyond
# 4300 digits): they are read as this out-of-range value, reported by document_problems.
_MAX_INT_DIGITS = 25
OUT_OF_RANGE = INT64_MAX + 1

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class DocumentError(ValueError):
    """A file that cannot be read as manifests; the message is one line, ready to print."""


class _StrictLoader(_Loader):  # type: ignore[valid-type,misc]
    """SafeLoader that refuses duplicate keys and reads huge integers as out of range."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                if key_node.value in seen:
                    raise DocumentError(
                        f"duplicate key {quote(key_node.value, 64)} (line "
                        f"{key_node.start_mark.line + 1}): kubectl refuses it too, and which "
                        "value would count is ambiguous"
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = str(node.value).replace("_", "").lstrip("+-")
        if len(digits) > _MAX_INT_DIGITS:
            return -OUT_OF_RANGE - 1 if str(node.value).startswith("-") else OUT_OF_RANGE
        return super().construct_yaml_int(node)  # type: ignore[no-any-return]


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_yaml_map)


def quote(value: object, limit: int = 80) -> str:
    """`repr(value)` for an error message, cut to about `limit` characters: a hostile value
    of megabytes must not become a message of megabytes."""
    if isinstance(value, str | bytes) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    text = repr(value) if not isinstance(value, dict | list) else _short_repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _short_repr(value: dict[Any, Any] | list[Any]) -> str:
    kind = "mapping" if isinstance(value, dict) else "list"
    return f"<a {kind} of {len(value)} entries>" if len(value) > 8 else repr(value)[:200]


def _line(event: yaml.Event) -> int:
    mark = event.start_mark
    return 0 if mark is None else mark.line + 1


def _check_events(text: str) -> None:
    """Depth and expanded size from the event stream, before any node is composed."""
    depth = 0
    stack: list[list[Any]] = []  # [anchor, expanded nodes] of each open collection
    anchored: dict[str, int] = {}
    total = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.DocumentStartEvent):
            total = 0
        elif isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise DocumentError(f"nested deeper than {MAX_DEPTH} levels (line {_line(event)})")
            stack.append([event.anchor, 1])
        elif isinstance(event, yaml.ScalarEvent | yaml.AliasEvent | yaml.CollectionEndEvent):
            if isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                anchor, size = stack.pop()
            elif isinstance(event, yaml.AliasEvent):
                if any(open_anchor == event.anchor for open_anchor, _ in stack):
                    raise DocumentError(
                        f"alias *{quote(event.anchor, 40)} refers to a value that contains it "
                        f"(line {_line(event)}): no JSON object can hold that"
                    )
                anchor, size = None, anchored.get(str(event.anchor), 1)
            else:
                anchor, size = event.anchor, 1
            if anchor is not None:
                anchored[anchor] = size
            if stack:
                stack[-1][1] += size
            total += size
            if total > MAX_NODES or (stack and stack[-1][1] > MAX_NODES):
                raise DocumentError(
                    f"more than {MAX_NODES} values once its aliases are expanded "
                    f"(line {_line(event)})"
                )


def parse_documents(text: str) -> list[Any]:
    """Every non-empty document of a YAML (or JSON) text; DocumentError if it cannot be read
    within the bounds above, or is not YAML."""
    if len(text) > MAX_FILE_BYTES:
        raise DocumentError(f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    try:
        _check_events(text)
        docs = list(yaml.load_all(text, Loader=_StrictLoader))
    except DocumentError:
        raise
    except yaml.YAMLError as err:
        raise DocumentError(f"not valid YAML/JSON: {_one_line(str(err))}") from None
    except (RecursionError, ValueError, MemoryError) as err:
        raise DocumentError(f"cannot be read: {type(err).__name__}: {quote(str(err))}") from None
    return [d for d in docs if d is not None]


def read_documents(path: str | Path) -> list[Any]:
    """parse_documents of a file, read no further than the size bound."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise DocumentError(f"cannot read: {err.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise DocumentError(f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DocumentError(f"not UTF-8 text (byte {err.start})") from None
    return parse_documents(text)


def _one_line(message: str, limit: int = 400) -> str:
    line = " ".join(message.split())
    return line if len(line) <= limit else line[:limit] + "..."


def _join(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    part = str(key) if len(str(key)) <= 64 else quote(str(key), 64)
    return f"{path}.{part}" if path else part


def document_problems(doc: Any, path: str = "") -> list[str]:
    """Values no Kubernetes object can hold, by field path: integers outside 64 bits (the
    API server stores int64), infinities and NaN (JSON has none)."""
    problems: list[str] = []
    todo: list[tuple[str, Any]] = [(path, doc)]
    while todo and len(problems) < 20:
        where, value = todo.pop()
        if isinstance(value, dict):
            todo += [(_join(where, k), v) for k, v in value.items()]
        elif isinstance(value, list):
            todo += [(_join(where, i), v) for i, v in enumerate(value)]
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            problems.append(
                f"{where or '<root>'}: integer out of range: Kubernetes stores 64-bit integers "
                f"({INT64_MIN}..{INT64_MAX})"
            )
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(
                f"{where or '<root>'}: must be a finite number (JSON, and so Kubernetes, has "
                f"no {value}); got {value}"
            )
    return sorted(problems)
