"""The spec-derived part of a job's parse, kept for the job's next passes.

Every pass parses its job (`reconcile.parse`): validates the spec with pydantic, checks the
platform's policy, plans the placement and renders the children, ~1-2 ms of the operator's
CPU. Most passes after a job's first (KubeRay's first status, the trainer's reports, pods
coming) see the very spec the first one parsed: their parse is taken over (`reparse`), and
only the status is read again. 1,024 entries cover the passes that follow soon after: in a
burst a new job's second pass waits for up to 256 new jobs' first passes (`PassSlots`); an
older one is parsed again, as before. Keyed by what the parse reads of the body besides
its status: namespace, name, UID, generation and a digest of the spec.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from ..builders.encoding import compact
from ..reconcile.parse import Parsed, parse, reparse
from ..settings import OperatorSettings

# Each entry holds a parsed job and its rendered children: ~3 KB (tracemalloc, 300 distinct
# jobs), 3 MB at most.
PARSE_MEMO_SIZE = 1024

_MemoKey = tuple[Any, ...]


class ParseMemo:
    def __init__(self, settings: OperatorSettings, size: int = PARSE_MEMO_SIZE) -> None:
        self._settings = settings
        self._size = size
        self._entries: OrderedDict[_MemoKey, Parsed] = OrderedDict()

    def parse(self, body: Mapping[str, Any]) -> Parsed:
        key = _key(body)
        earlier = self._entries.get(key)
        if earlier is not None:
            self._entries.move_to_end(key)
            return reparse(earlier, body)
        parsed = parse(body, self._settings)
        self._entries[key] = _kept(parsed)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return parsed

    def forget(self, namespace: str, name: str) -> None:
        """The job is gone: its entries go too (a new job of that name has another UID)."""
        for key in [k for k in self._entries if k[:2] == (namespace, name)]:
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


def _kept(parsed: Parsed) -> Parsed:
    """What `reparse` takes over, less what it reads anew from the next body (the body itself,
    its status, report and metadata): an entry keeps no whole job."""
    job = parsed.job
    if job is not None:
        job = job.model_copy(update={"metadata": {}, "status": None})
    return dataclasses.replace(parsed, body={}, previous=None, mirrored=None, job=job)


def _key(body: Mapping[str, Any]) -> _MemoKey:
    meta = body.get("metadata") or {}
    spec = hashlib.blake2b(compact(body.get("spec") or {}), digest_size=16).digest()
    return (meta.get("namespace"), meta.get("name"), meta.get("uid"), meta.get("generation"), spec)
