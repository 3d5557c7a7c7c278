"""Applying one child with server-side apply (field manager `rlhf-operator`).

The API server merges what the operator applies into the live object, keeps what other
managers set (a status, Kueue's `spec.suspend`), and removes what the operator applied before
but no longer applies: a field the spec no longer sets goes, an edit by hand comes back
(`force`: the operator's fields are the operator's).

Our adoption rules stay: only a child the job provably owns is ever changed, one with a
controller reference to this job's UID, or (a retained PVC, which has none by design) our
label and this job's UID annotation. Anything else with a child's name (an orphan, another
controller's object, a user's, a former job's) is left byte-identical and reported as a
conflict: adopting by name would let a job author make the operator take over, rewrite and
later garbage-collect objects they could not edit themselves. So a child not known to be the
job's is looked at (its metadata) before anything is applied; create-only children are created
(POST: a 409 never touches the existing object) and never applied. A new job's children are
all created that way, without the look (a request less per child; a 409 falls back to it), and
server-side applied from their first change on, when their POST's Update entry is taken over
as one made before server-side apply is at the look (`takeover.py`).
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..builders.common import JOB_UID_ANNOTATION, MANAGED_BY_LABEL
from ..reconcile.desired import Desired
from ..settings import OPERATOR_NAME
from .client import JSON, ApiError, KubeApi
from .takeover import drop_legacy_annotation, take_over

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


def _with_generated(want: Mapping[str, Any], keys: tuple[str, ...]) -> JSON:
    """`want` with a fresh random value for each generated key (only ever at creation)."""
    body = copy.deepcopy(dict(want))
    if keys:
        body["stringData"] = {key: secrets.token_urlsafe(TOKEN_BYTES) for key in keys}
    return body


def _version(obj: Mapping[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("resourceVersion")


def _with_live(
    want: Mapping[str, Any], live: Mapping[str, Any], paths: tuple[tuple[str, ...], ...]
) -> JSON:
    """`want` with the live object's value at each of `paths` (fields another controller owns
    after creation), and the live resourceVersion as a precondition: if the object changed
    since it was read, the server answers 409 rather than put an old value back."""
    body = copy.deepcopy(dict(want))
    for path in paths:
        value: Any = live
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        node = body
        for part in path[:-1]:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = copy.deepcopy(value)
    body["metadata"]["resourceVersion"] = _version(live)
    return body


async def _create_only(api: KubeApi, desired: Desired, *, look_first: bool) -> Applied:
    """Create it if it is not there; never change it (a PVC's spec is immutable, the report's
    data is the trainer's, a token must not rotate). Looked at by its metadata alone (a
    Secret's data never comes back)."""
    want = desired.obj
    existing = await api.get(want, metadata_only=True) if look_first else None
    if existing is None:
        try:
            created = await api.create(_with_generated(want, desired.generated))
        except ApiError as err:
            if err.status != 409:
                raise
            # Created meanwhile: by our previous life, or by someone else (checked below).
            existing = await api.get(want, metadata_only=True)
            if existing is None:
                raise
        else:
            created.pop("data", None)  # never keep a generated value around
            return Applied(Outcome.CREATED, created)
    if not owns(want, existing):
        return Applied(Outcome.CONFLICT, existing, whose(existing))
    if await drop_legacy_annotation(api, want, existing):
        return Applied(Outcome.UPDATED, existing)
    return Applied(Outcome.UNCHANGED, existing)


async def _create_first(api: KubeApi, want: Mapping[str, Any]) -> Applied | None:
    """A new job's child, created without a look (ours by construction: a POST never touches
    an object that is there). None when the name is taken: whose it is must be looked at."""
    try:
        created = await api.create(want)
    except ApiError as err:
        if err.status != 409:
            raise
        return None
    return Applied(Outcome.CREATED, created)


async def apply(
    api: KubeApi, desired: Desired, *, known_ours: bool = False, probably_new: bool = False
) -> Applied:
    """Create, update, or leave alone. `known_ours`: this child was applied for this job
    before (its ownership is proven), so it is applied without a look. `probably_new` (a job
    seen for the first time) creates its children without looking first (a create-only one
    is never applied; the others are server-side applied from then on); a 409 falls back to
    a look."""
    want = desired.obj
    if desired.create_only:
        return await _create_only(api, desired, look_first=not probably_new)
    if probably_new and not known_ours:
        created = await _create_first(api, want)
        if created is not None:
            return created
    existing = None
    if not known_ours or desired.preserve:
        existing = await api.get(want, metadata_only=not desired.preserve)
        if existing is not None and not owns(want, existing):
            return Applied(Outcome.CONFLICT, existing, whose(existing))
        if existing is not None:
            existing = await take_over(api, want, existing)
    body = _with_live(want, existing, desired.preserve) if existing and desired.preserve else want
    applied = await api.apply(body)
    if existing is None and known_ours:
        # Not looked at: created by a POST (ours by construction), its fields may still be
        # owned by that write's Update entry, which would keep what this apply stopped setting.
        taken = await take_over(api, want, applied)
        if taken is not applied:
            applied = await api.apply(body)
    if existing is None and not known_ours:
        return Applied(Outcome.CREATED, applied)
    if existing is not None and _version(applied) == _version(existing):
        return Applied(Outcome.UNCHANGED, applied)
    return Applied(Outcome.UPDATED, applied)
