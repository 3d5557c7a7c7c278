"""Deletion: finalizers, owner-reference garbage collection, namespace and CRD teardown.

Simplifications (each says what the real control plane does instead):
- Garbage collection runs synchronously inside the deleting request, so when DELETE returns,
  dependents without finalizers are gone (the real garbage collector does it moments later).
- `propagationPolicy=Foreground` behaves as `Background` (the real server would keep the owner,
  with a `foregroundDeletion` finalizer, until its dependents are gone). `Orphan` works: the
  owner reference is removed from the dependents.
- Deleting a CRD removes its custom resources at once, ignoring their finalizers.
- Pods are deleted gracefully, as on the real server: a pod bound to a node and not yet
  finished only gets `deletionTimestamp` (now + grace period) and `deletionGracePeriodSeconds`;
  its kubelet stops the containers and then deletes it with grace 0. Without a kubelet (the
  operator's tests) pods are never bound, so they go at once.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .store import Store

JSON = dict[str, Any]


def _fresh(obj: JSON) -> JSON:
    """A new version of a stored object: new top level and metadata, shared (immutable) rest."""
    return {**obj, "metadata": dict(obj["metadata"])}


def _pod_grace(obj: JSON, requested: int | None) -> int:
    """Seconds a pod's kubelet gets to stop it; 0 when no kubelet runs it (or it finished)."""
    if not (obj.get("spec") or {}).get("nodeName"):
        return 0
    if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    if requested is not None:
        return max(0, requested)
    return int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))


def delete_object(
    store: Store,
    gr: tuple[str, str],
    obj: JSON,
    propagation: str | None,
    grace_period: int | None = None,
) -> tuple[JSON, bool]:
    meta = obj["metadata"]
    is_namespace = gr == ("", "namespaces")
    is_pod = gr == ("", "pods")
    if is_pod and not meta.get("finalizers"):
        grace = _pod_grace(obj, grace_period)
        pending = meta.get("deletionTimestamp")
        if grace > 0 and not pending:
            marked = _fresh(obj)
            deadline = store.clock() + datetime.timedelta(seconds=grace)
            marked["metadata"]["deletionTimestamp"] = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
            marked["metadata"]["deletionGracePeriodSeconds"] = grace
            return store.commit(gr, "MODIFIED", marked, obj), False
        if grace > 0:
            return obj, False  # already terminating: its kubelet finishes the deletion
        return store.commit(gr, "DELETED", _fresh(obj), obj), True
    if meta.get("deletionTimestamp"):
        return obj, False  # already being deleted: nothing changes
    if meta.get("finalizers") or is_namespace:
        marked = _fresh(obj)
        marked["metadata"]["deletionTimestamp"] = store.timestamp()
        marked["metadata"]["deletionGracePeriodSeconds"] = 0
        marked["metadata"]["generation"] = meta.get("generation", 0) + 1
        if is_namespace:
            marked["status"] = {"phase": "Terminating"}
        stored = store.commit(gr, "MODIFIED", marked, obj)
        if is_namespace:
            _empty_namespace(store, meta["name"])
            maybe_finish_namespace(store, meta["name"])
            gone = (None, meta["name"]) not in store.objects[gr]
            return stored, gone
        return stored, False
    if propagation == "Orphan":
        _orphan_dependents(store, meta["uid"])
    return store.commit(gr, "DELETED", _fresh(obj), obj), True


def _dependents(store: Store, owner_uid: str) -> list[tuple[tuple[str, str], JSON]]:
    return [
        (gr, obj)
        for gr, objects in store.objects.items()
        for obj in list(objects.values())
        if any(ref.get("uid") == owner_uid for ref in obj["metadata"].get("ownerReferences") or [])
    ]


def collect_dependents(store: Store, owner: JSON) -> None:
    """Background garbage collection of everything the removed owner owned."""
    owner_uid = owner["metadata"]["uid"]
    for gr, dependent in _dependents(store, owner_uid):
        current = store.objects[gr].get(
            (dependent["metadata"].get("namespace"), dependent["metadata"]["name"])
        )
        if current is None or current["metadata"]["uid"] != dependent["metadata"]["uid"]:
            continue  # already collected through another path
        refs = current["metadata"].get("ownerReferences") or []
        alive = [r for r in refs if r.get("uid") != owner_uid and r.get("uid") in store.uids]
        if alive:  # other owners remain: only the dangling reference goes
            updated = _fresh(current)
            updated["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != owner_uid]
            store.commit(gr, "MODIFIED", updated, current)
        else:
            delete_object(store, gr, current, None)


def _orphan_dependents(store: Store, owner_uid: str) -> None:
    for gr, dependent in _dependents(store, owner_uid):
        updated = _fresh(dependent)
        updated["metadata"]["ownerReferences"] = [
            r for r in updated["metadata"]["ownerReferences"] if r.get("uid") != owner_uid
        ]
        if not updated["metadata"]["ownerReferences"]:
            del updated["metadata"]["ownerReferences"]
        store.commit(gr, "MODIFIED", updated, dependent)


def _empty_namespace(store: Store, namespace: str) -> None:
    for gr, objects in list(store.objects.items()):
        for key in [k for k in objects if k[0] == namespace]:
            current = objects.get(key)  # a cascade may have removed or changed it meanwhile
            if current is not None:
                delete_object(store, gr, current, None)


def maybe_finish_namespace(store: Store, namespace: str) -> JSON | None:
    """The namespace controller removes a terminating namespace once it is empty."""
    ns = store.objects[("", "namespaces")].get((None, namespace))
    if ns is None or not ns["metadata"].get("deletionTimestamp"):
        return None
    if ns["metadata"].get("finalizers"):
        return None
    if any(key[0] == namespace for objects in store.objects.values() for key in objects):
        return None
    return store.commit(("", "namespaces"), "DELETED", _fresh(ns), ns)


def drop_custom_resources(store: Store, crd: JSON) -> None:
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    for obj in list(store.objects[(group, plural)].values()):
        store.commit((group, plural), "DELETED", _fresh(obj), obj)
    store.close_watchers((group, plural))
    store.registry.remove_crd(group, plural)
