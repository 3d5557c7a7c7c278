"""An RLHFJob as the watch cache keeps it: its metadata as it came, its spec and status packed.

The cache holds every job the cluster keeps (waiting, running, finished: thousands on a
platform), and a job as parsed JSON costs ~24 KB of Python objects (its spec with the CRD's
defaults filled in, its status with conditions) for ~5 KB of JSON. With spec and status
packed (compact JSON, zlib) it takes ~4 KB (the bench's job, Running), unpacked on each read
(tens of microseconds; a pass parses the spec with pydantic anyway, for milliseconds). What is read
without a pass (the phase for a pod event, a producing job's output, the metrics) reads the
status alone.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from typing import Any

from ..builders.encoding import compact, decode
from .reader import without_bookkeeping

# The parts a job's size grows with; the rest (apiVersion, kind, metadata) stays as it came.
PACKED = ("spec", "status")
# zlib's fastest level: ~4x on a job's JSON, in microseconds.
_LEVEL = 1


def _pack(value: Any) -> bytes:
    return zlib.compress(compact(value), _LEVEL)


def _unpack(packed: bytes) -> Any:
    return decode(zlib.decompress(packed))


class StoredJob(Mapping[str, Any]):
    """A read-only view of the job as it came (without `managedFields` and kopf's diff-base):
    each read of `spec` or `status` returns a fresh copy, which the caller may keep or change."""

    __slots__ = ("_packed", "_plain")

    def __init__(self, body: Mapping[str, Any]) -> None:
        plain = without_bookkeeping(body)
        self._packed = {k: _pack(plain.pop(k)) for k in PACKED if k in plain}
        self._plain = plain

    def __getitem__(self, key: str) -> Any:
        packed = self._packed.get(key)
        if packed is not None:
            return _unpack(packed)
        return self._plain[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._plain
        yield from self._packed

    def __len__(self) -> int:
        return len(self._plain) + len(self._packed)

    def __contains__(self, key: object) -> bool:
        return key in self._plain or key in self._packed

    def __eq__(self, other: object) -> bool:
        # kopf's index compares a job's new entry with the one it replaces on every event:
        # packed against packed, not unpacked (Mapping's way: spec and status decoded twice).
        if isinstance(other, StoredJob):
            return self._plain == other._plain and self._packed == other._packed
        return super().__eq__(other)

    def __repr__(self) -> str:
        meta = self._plain.get("metadata") or {}
        return f"StoredJob({meta.get('namespace')}/{meta.get('name')})"
