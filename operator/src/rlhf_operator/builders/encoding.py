"""JSON as the operator writes and reads it on its hot paths (orjson, pure).

A job's pass serialises its children several times (the size check, the digest the applier
compares, the request body) and decodes every answer: with the standard library's encoder that
was a fifth of the operator's CPU at 2,000 jobs (bench/operator_scale.py --sample). orjson does
the same in C, with two differences that matter here, both handled: integers beyond 64 bits
(valid JSON, which a spec may hold) fall back to the standard library, and its output is
already compact UTF-8 (what the API server stores and counts).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# Keys that are not strings (an int key in a dict a builder made) become strings, as
# json.dumps makes them.
_COMPACT = orjson.OPT_NON_STR_KEYS
_CANONICAL = orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS


def compact(value: Any) -> bytes:
    """`value` as compact JSON in UTF-8 (json.dumps with separators (",", ":") and
    ensure_ascii=False, encoded)."""
    try:
        return orjson.dumps(value, option=_COMPACT)
    except TypeError:  # an integer beyond 64 bits, or a type JSON has no form for
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def canonical(value: Any) -> bytes:
    """`value` as compact JSON with sorted keys: equal values, equal bytes (for digests).
    What JSON has no form for is written as its str()."""
    try:
        return orjson.dumps(value, option=_CANONICAL, default=str)
    except TypeError:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
        ).encode()


def decode(data: bytes | str) -> Any:
    """JSON text (bytes in UTF-8, or str) as Python values."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # orjson refuses integers beyond 64 bits, which the standard library reads; text that
        # is not JSON raises from here as it did (json.JSONDecodeError, a ValueError).
        return json.loads(data)


def size(value: Any) -> int:
    """Bytes of `value` as compact JSON: what the API server stores and counts."""
    return len(compact(value))
