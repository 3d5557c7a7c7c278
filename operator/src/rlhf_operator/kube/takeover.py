"""Taking over, once, the children the operator made before it used server-side apply.

That operator created and replaced its children with POST and PUT as `rlhf-operator`, so their
managedFields hold an entry (manager `rlhf-operator`, operation Update) that keeps owning every
field it wrote, and they carry its `rlhf.dev/desired-hash` annotation. Server-side apply
removes only what the applier's own Apply entry owns: a field the spec stopped setting would
stay forever, co-owned by the old entry. As kubectl's csaupgrade does for client-side apply,
the Update entry's fields are moved into the Apply entry (one JSON patch, conditional on the
resourceVersion); the apply that follows then removes the annotation and whatever else the
operator no longer sets. A create-only child (never applied) just loses the annotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api.v1alpha1 import GROUP
from .client import FIELD_MANAGER, JSON, KubeApi

# The annotation the operator before server-side apply kept on every child it made.
LEGACY_HASH_ANNOTATION = f"{GROUP}/desired-hash"


def merged_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> JSON:
    """The union of two `fieldsV1` sets (nested maps of `f:`/`k:`/`v:`/`i:` keys to sets)."""
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged_fields(out[key], value)
        else:
            out.setdefault(key, value)
    return out


def _ours(entry: Mapping[str, Any], operation: str) -> bool:
    return (
        entry.get("manager") == FIELD_MANAGER
        and entry.get("operation") == operation
        and not entry.get("subresource")
    )


def taken_over(managed: list[JSON]) -> list[JSON] | None:
    """`managedFields` with the fields of our Update entries (of the Apply entry's API version)
    moved into our Apply entry, made from them where there is none yet; None when there is
    nothing to move. Other managers' entries are kept as they are."""
    updates = [e for e in managed if _ours(e, "Update")]
    if not updates:
        return None
    target = next((e for e in managed if _ours(e, "Apply")), None)
    version = (target or updates[-1]).get("apiVersion")
    moved = [e for e in updates if e.get("apiVersion") == version]
    fields: JSON = dict((target or {}).get("fieldsV1") or {})
    for entry in moved:
        fields = merged_fields(fields, entry.get("fieldsV1") or {})
    merged = {
        **(target or moved[-1]),
        "operation": "Apply",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    out = [e for e in managed if e is not target and not any(e is m for m in moved)]
    return [*out, merged]


async def take_over(api: KubeApi, want: Mapping[str, Any], existing: JSON) -> JSON:
    """`existing` (a child of ours, read at least by its metadata) with our old Update entries
    folded into the Apply entry; `existing` itself when there is nothing to fold. A change
    meanwhile fails the patch's test (HTTP 422): the pass is tried again."""
    meta = existing.get("metadata") or {}
    managed = taken_over(list(meta.get("managedFields") or ()))
    if managed is None:
        return existing
    ops: list[JSON] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
        {"op": "replace", "path": "/metadata/managedFields", "value": managed},
    ]
    return await api.json_patch(want, ops)


async def drop_legacy_annotation(api: KubeApi, want: Mapping[str, Any], existing: JSON) -> bool:
    """A create-only child's old desired-hash annotation removed; False when it had none."""
    annotations = (existing.get("metadata") or {}).get("annotations") or {}
    if LEGACY_HASH_ANNOTATION not in annotations:
        return False
    await api.patch(want, {"metadata": {"annotations": {LEGACY_HASH_ANNOTATION: None}}})
    return True
