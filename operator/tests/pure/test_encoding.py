"""The operator's JSON on its hot paths (`builders.encoding`, orjson): the same bytes the
standard library writes where it matters (sizes the API server counts, digests that must not
change between passes), and what orjson alone refuses still works."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlhf_operator.builders.encoding import canonical, compact, decode, size
from rlhf_operator.reconcile.desired import Desired

from .factories import job_body

SAMPLES: list[Any] = [
    {"metadata": {"name": "a", "labels": {"rlhf.dev/job": "a"}}, "data": {"job.yaml": "x: 1\n"}},
    {"unicode": "chat template: «{{ messages }}» 模板", "n": [1, 2.5, True, None]},
    [],
    {"nested": {"deep": [{"k": "v"}] * 3}},
]


@pytest.mark.parametrize("value", SAMPLES)
def test_compact_is_the_standard_librarys_compact_utf8(value: Any) -> None:
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    assert compact(value) == expected
    assert size(value) == len(expected)
    assert decode(compact(value)) == value
    assert decode(expected.decode()) == value


def test_canonical_sorts_keys_so_equal_values_give_equal_bytes() -> None:
    assert canonical({"b": 1, "a": {"d": 2, "c": 3}}) == canonical({"a": {"c": 3, "d": 2}, "b": 1})
    assert canonical({"b": 1, "a": 2}) == b'{"a":2,"b":1}'


def test_what_orjson_refuses_falls_back_to_the_standard_library() -> None:
    huge = 2**70  # valid JSON; orjson's integers stop at 64 bits
    assert decode(compact({"n": huge})) == {"n": huge}
    assert decode(canonical({"n": huge})) == {"n": huge}
    assert decode(f'{{"n": {huge}}}') == {"n": huge}
    # Keys that are not strings are written as json.dumps writes them.
    assert compact({1: "a"}) == b'{"1":"a"}'
    # What JSON has no form for goes into a digest as its str().
    assert canonical({"when": object}) == b'{"when":"<class \'object\'>"}'


def test_text_that_is_not_json_still_raises_a_value_error() -> None:
    with pytest.raises(ValueError):
        decode(b"<html>502 Bad Gateway</html>")


def test_a_childs_digest_does_not_depend_on_key_order() -> None:
    body = job_body()
    reordered = dict(reversed(list(body.items())))
    assert Desired(body).digest == Desired(reordered).digest
    assert Desired(body).digest != Desired({**body, "extra": 1}).digest
