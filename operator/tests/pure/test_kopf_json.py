"""kopf's watch streams decoded by orjson (`handlers.kopf_json`): installed where kopf reads
its streams, the same values as the standard library, and idempotent."""

from __future__ import annotations

import json

from kopf._cogs.clients import api as kopf_api

from rlhf_operator.handlers.kopf_json import decode_watch_streams_with_orjson


def test_kopf_reads_its_streams_with_orjsons_loads() -> None:
    assert decode_watch_streams_with_orjson()
    assert decode_watch_streams_with_orjson()  # again: nothing changes
    shim = kopf_api.json
    line = b'{"type":"ADDED","object":{"metadata":{"name":"a"},"n":[1,2.5,null,true]}}'
    assert shim.loads(line.decode()) == json.loads(line)
    assert shim.loads(f'{{"big": {2**70}}}') == {"big": 2**70}  # beyond orjson: stdlib
    assert shim.JSONDecodeError is json.JSONDecodeError and shim.dumps is json.dumps


def test_the_stream_reader_kopf_uses_still_calls_json_loads() -> None:
    """Fails on a kopf upgrade that decodes its streams elsewhere (the shim would do nothing)."""
    import inspect

    assert "json.loads(" in inspect.getsource(kopf_api.stream)
