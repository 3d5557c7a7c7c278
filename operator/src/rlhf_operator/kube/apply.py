"""Applying one child: create it, or replace it when it differs from what is desired.

Only a child the job provably owns is ever changed: one with a controller reference to this
job's UID, or (a retained PVC, which has none by design) our label and this job's UID
annotation. Anything else with a child's name (an orphan, another controller's object, a
user's, a former job's) is left byte-identical and reported as a conflict: adopting by name
would let a job author make the operator take over, rewrite and later garbage-collect
objects they could not edit themselves.

`apply` compares in two ways: a hash of the desired object, stored in an annotation, notices
fields the spec no longer sets (a plain subset check would keep them forever), and a subset
check notices edits made by hand. Server-side defaults do not count as differences.
"""

from __future__ import annotations

import copy
import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..api.v1alpha1 import GROUP
from ..builders.common import JOB_UID_ANNOTATION, MANAGED_BY_LABEL
from ..reconcile.desired import Desired
from ..settings import OPERATOR_NAME
from .client import JSON, ApiError, KubeApi

HASH_ANNOTATION = f"{GROUP}/desired-hash"
# Random values of `Desired.generated` keys: 32 bytes, URL-safe (a Ray token, for one).
TOKEN_BYTES = 32


class Outcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    CONFLICT = "conflict"  # an object with this name that the job does not provably own


@dataclass(frozen=True)
class Applied:
    outcome: Outcome
    obj: JSON
    owner: str = ""  # for conflicts: whose it is, as far as its metadata tells


def desired_hash(obj: Mapping[str, Any]) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def is_subset(want: Any, have: Any) -> bool:
    """Everything in `want` is in `have` (extra keys in `have` are server defaults)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            k in have and is_subset(v, have[k]) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(is_subset(w, h) for w, h in zip(want, have, strict=True))
        )
    return bool(want == have)


def _without(obj: Mapping[str, Any], paths: tuple[tuple[str, ...], ...]) -> JSON:
    out = copy.deepcopy(dict(obj))
    for path in paths:
        node: Any = out
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return out


def _copy_paths(src: Mapping[str, Any], dst: JSON, paths: tuple[tuple[str, ...], ...]) -> None:
    for path in paths:
        value: Any = src
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is None:
            continue
        node = dst
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = copy.deepcopy(value)


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), None)


def owns(want: Mapping[str, Any], existing: Mapping[str, Any]) -> bool:
    """`existing` is the very child `want` describes: its controller is this job (same UID),
    or, for a child without owner reference by design, it carries our label and this job's
    UID annotation. A name, labels alone, or an orphan prove nothing."""
    ours = _controller(want)
    if ours is not None:
        theirs = _controller(existing)
        return theirs is not None and bool(ours.get("uid")) and theirs.get("uid") == ours.get("uid")
    want_meta, have_meta = want.get("metadata", {}), existing.get("metadata", {})
    uid = (want_meta.get("annotations") or {}).get(JOB_UID_ANNOTATION)
    return (
        bool(uid)
        and (have_meta.get("annotations") or {}).get(JOB_UID_ANNOTATION) == uid
        and (have_meta.get("labels") or {}).get(MANAGED_BY_LABEL) == OPERATOR_NAME
    )


def whose(existing: Mapping[str, Any]) -> str:
    """Who an object that is not ours belongs to, for the ChildConflict message."""
    theirs = _controller(existing)
    if theirs is not None:
        return f"controlled by {theirs.get('kind')}/{theirs.get('name')}"
    uid = (existing.get("metadata", {}).get("annotations") or {}).get(JOB_UID_ANNOTATION)
    if uid:
        return f"kept from an earlier job with this name (uid {uid})"
    return "not created by this job"


def _content(obj: Mapping[str, Any]) -> JSON:
    """What we compare: everything but metadata/status, plus our labels."""
    out = {k: v for k, v in obj.items() if k not in {"metadata", "status", "apiVersion", "kind"}}
    out["labels"] = obj.get("metadata", {}).get("labels") or {}
    return out


def _with_generated(want: Mapping[str, Any], keys: tuple[str, ...]) -> JSON:
    """`want` with a fresh random value for each generated key (only ever at creation)."""
    body = copy.deepcopy(dict(want))
    if keys:
        body["stringData"] = {key: secrets.token_urlsafe(TOKEN_BYTES) for key in keys}
    return body


async def apply(api: KubeApi, desired: Desired, *, probably_new: bool = False) -> Applied:
    """Create, update, or leave alone. `probably_new` (a job seen for the first time) tries
    the create first, saving a GET per child in the common case; a 409 falls back. A
    create-only child is looked at by its metadata alone (a Secret's data never comes back)."""
    want = desired.obj
    digest = desired_hash(_without(want, desired.preserve))
    metadata_only = desired.create_only
    existing = None if probably_new else await api.get(want, metadata_only=metadata_only)
    if existing is None:
        body = _with_generated(want, desired.generated)
        body["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = digest
        try:
            created = await api.create(body)
        except ApiError as err:
            if err.status != 409:
                raise
            # Created meanwhile: by our previous life, or by someone else (checked below).
            existing = await api.get(want, metadata_only=metadata_only)
            if existing is None:
                raise
        else:
            created.pop("data", None)  # never keep a generated value around
            return Applied(Outcome.CREATED, created)
    if not owns(want, existing):
        return Applied(Outcome.CONFLICT, existing, whose(existing))
    if desired.create_only:
        return Applied(Outcome.UNCHANGED, existing)
    stored_hash = (existing["metadata"].get("annotations") or {}).get(HASH_ANNOTATION)
    if stored_hash == digest and is_subset(
        _content(_without(want, desired.preserve)), _content(existing)
    ):
        return Applied(Outcome.UNCHANGED, existing)
    body = copy.deepcopy(want)
    _copy_paths(existing, body, desired.preserve)
    meta = copy.deepcopy(existing["metadata"])
    meta["labels"] = {**(meta.get("labels") or {}), **want["metadata"].get("labels", {})}
    meta["annotations"] = {**(meta.get("annotations") or {}), HASH_ANNOTATION: digest}
    body["metadata"] = meta  # keeps resourceVersion: a concurrent change answers 409
    return Applied(Outcome.UPDATED, await api.replace(body))
