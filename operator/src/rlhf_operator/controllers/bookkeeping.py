"""What the job controller keeps about its own writes, and the Events its actions post: small
pure helpers, apart from the controller's I/O."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from ..api.v1alpha1 import EventReason, EventType
from ..builders.encoding import canonical
from ..kube.apply import Applied, Outcome
from ..reconcile.events import Event

JSON = dict[str, Any]


def resource_version(body: Mapping[str, Any] | None) -> int:
    try:
        return int(((body or {}).get("metadata") or {}).get("resourceVersion", -1))
    except (TypeError, ValueError):
        return -1


def merged(old: Mapping[str, Any], patch: Mapping[str, Any]) -> JSON:
    """A JSON merge patch applied (RFC 7386): what the server will store."""
    out = dict(old)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def fingerprint(body: Mapping[str, Any], status: Any) -> tuple[str, Any, bytes]:
    meta = body.get("metadata") or {}
    text = canonical(status or {})
    return str(meta.get("uid", "")), meta.get("generation"), hashlib.sha1(text).digest()


def action_events(outcomes: list[Applied], deleted: tuple[str, ...]) -> list[Event]:
    by_outcome: defaultdict[Outcome, list[str]] = defaultdict(list)
    for applied in outcomes:
        by_outcome[applied.outcome].append(
            f"{applied.obj['kind']} {applied.obj['metadata']['name']}"
        )
    reasons = (
        (Outcome.CREATED, EventType.NORMAL, EventReason.CREATED, "created"),
        (Outcome.UPDATED, EventType.NORMAL, EventReason.UPDATED, "updated to match the spec"),
    )
    events = [
        Event(kind, reason, f"{verb}: {', '.join(by_outcome[outcome])}")
        for outcome, kind, reason, verb in reasons
        if by_outcome[outcome]
    ]
    if deleted:
        events.append(
            Event(
                EventType.NORMAL,
                EventReason.DELETED,
                f"deleted finished RayJob {', '.join(deleted)}",
            )
        )
    return events
