"""Watch events: the change history and the per-connection watchers that stream it.

Every write appends a `Change` to the history of its group/resource (kept in full, so a watch
from any past resourceVersion can be replayed and `410 Gone` never happens). A watcher is
registered and filled with its replay in one synchronous step, so no event can fall between
the replay and the live stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .selectors import Matcher

JSON = dict[str, Any]


@dataclass
class Change:
    """One stored write: ADDED, MODIFIED or DELETED, with the object before and after."""

    rv: int
    type: str
    obj: JSON  # never mutated once recorded
    old: JSON | None = None
    _lines: dict[tuple[str, str], bytes] = field(default_factory=dict, repr=False)

    def line(self, event_type: str, api_version: str) -> bytes:
        """The serialised watch event, cached: many watchers usually want the same bytes."""
        key = (event_type, api_version)
        if key not in self._lines:
            obj = self.obj
            if obj.get("apiVersion") != api_version:
                obj = {**obj, "apiVersion": api_version}
            self._lines[key] = json.dumps({"type": event_type, "object": obj}).encode() + b"\n"
        return self._lines[key]


# Put into a watcher's queue to end its stream (server stop, CRD deleted).
END = object()


@dataclass(eq=False)
class Watcher:
    """One open watch connection's filter and queue of pending event lines."""

    group_resource: tuple[str, str]
    api_version: str
    namespace: str | None
    labels: Matcher
    fields: Matcher
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)

    def _selects(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.labels(obj) and self.fields(obj)

    def offer(self, change: Change) -> None:
        """Queue the event this watcher should see, if any.

        Like the real server, an object that starts matching the selectors is reported as
        ADDED, and one that stops matching as DELETED.
        """
        if change.type == "DELETED":
            now, before = False, self._selects(change.obj)
        elif change.type == "ADDED":
            now, before = self._selects(change.obj), False
        else:
            now, before = self._selects(change.obj), self._selects(change.old)
        if now and before:
            event_type = "MODIFIED"
        elif now:
            event_type = "ADDED"
        elif before:
            event_type = "DELETED"
        else:
            return
        self.queue.put_nowait(change.line(event_type, self.api_version))

    def offer_initial(self, obj: JSON) -> None:
        """A synthetic ADDED for an object that exists when a watch starts with no version."""
        if self._selects(obj):
            self.queue.put_nowait(Change(0, "ADDED", obj).line("ADDED", self.api_version))

    def close(self) -> None:
        self.queue.put_nowait(END)


def bookmark(kind: str, api_version: str, rv: int, *, initial_end: bool = False) -> bytes:
    metadata: JSON = {"resourceVersion": str(rv)}
    if initial_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": kind, "apiVersion": api_version, "metadata": metadata}
    return json.dumps({"type": "BOOKMARK", "object": obj}).encode() + b"\n"
