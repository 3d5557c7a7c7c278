"""The emulated API server's storage: objects, resourceVersions, history and watchers.

Every method is synchronous: on one asyncio loop each request's write happens atomically with
respect to every other request and watch, which is what etcd's transactions give the real
server. Stored objects are never mutated in place (each write stores a new dict), so the
history can share them with the current state and serialise them lazily.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import datetime
import json
import random
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from support.crd_schema import FieldError

from . import admission, deletion, errors, patches, quota
from .resources import Registry, ResourceInfo
from .selectors import Matcher
from .watch import Change, Watcher

JSON = dict[str, Any]
GroupResource = tuple[str, str]
ObjectKey = tuple[str | None, str]

_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
APPLY, JSON_PATCH, MERGE = patches.APPLY, patches.JSON_PATCH, patches.MERGE


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Store:
    def __init__(
        self, registry: Registry, clock: Callable[[], datetime.datetime] = utc_now
    ) -> None:
        self.registry = registry
        self.clock = clock
        self.rv = 1000  # etcd's revision: global, monotonic; starts above small test numbers
        self.objects: dict[GroupResource, dict[ObjectKey, JSON]] = defaultdict(dict)
        self._history: dict[GroupResource, list[Change]] = defaultdict(list)
        self._watchers: dict[GroupResource, set[Watcher]] = defaultdict(set)
        self.uids: dict[str, tuple[GroupResource, ObjectKey]] = {}
        self._applied: dict[tuple[str, str], frozenset[patches.Path]] = {}

    # --- reading ----------------------------------------------------------------------------

    def timestamp(self) -> str:
        return self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")

    def find(self, info: ResourceInfo, namespace: str | None, name: str) -> JSON | None:
        return self.objects[info.group_resource].get((namespace if info.namespaced else None, name))

    def get(self, info: ResourceInfo, namespace: str | None, name: str) -> JSON:
        obj = self.find(info, namespace, name)
        if obj is None:
            raise errors.not_found(info.qualified, name, info.group)
        return obj

    def items(self, info: ResourceInfo) -> Iterator[JSON]:
        yield from self.objects[info.group_resource].values()

    def select(
        self,
        info: ResourceInfo,
        namespace: str | None,
        labels: Matcher,
        fields: Matcher,
        *,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> tuple[list[JSON], str, str]:
        """Matching objects sorted by (namespace, name): (items, list RV, continue token)."""
        rv, after = self.rv, None
        if continue_token:
            try:
                rv, after_list = json.loads(base64.urlsafe_b64decode(continue_token))
                after = (after_list[0], after_list[1])
            except (ValueError, TypeError, IndexError, binascii.Error):
                raise errors.bad_request(f"invalid continue token {continue_token!r}") from None
        found = [
            obj
            for key, obj in sorted(self.objects[info.group_resource].items(), key=_sort_key)
            if (namespace is None or key[0] == namespace)
            and (after is None or _sort_key((key, obj)) > _sort_key((after, obj)))
            and labels(obj)
            and fields(obj)
        ]
        token = ""
        if limit and len(found) > limit:
            found = found[:limit]
            last = found[-1]["metadata"]
            cursor = [last.get("namespace") or "", last["name"]]
            token = base64.urlsafe_b64encode(json.dumps([rv, cursor]).encode()).decode()
        return found, str(rv), token

    # --- watching ---------------------------------------------------------------------------

    def watch(
        self,
        info: ResourceInfo,
        namespace: str | None,
        labels: Matcher,
        fields: Matcher,
        since: int | None,
    ) -> Watcher:
        """Register a watcher, pre-filled with its replay, in one step (nothing falls between).

        `since=None` (or 0) starts with a synthetic ADDED for each existing object; otherwise
        every recorded change after `since` is replayed from the full history.
        """
        watcher = Watcher(info.group_resource, info.api_version, namespace, labels, fields)
        if not since:
            for _, obj in sorted(self.objects[info.group_resource].items(), key=_sort_key):
                watcher.offer_initial(obj)
        else:
            for change in self._history[info.group_resource]:
                if change.rv > since:
                    watcher.offer(change)
        self._watchers[info.group_resource].add(watcher)
        return watcher

    def watchers_of(self, info: ResourceInfo) -> builtins.list[Watcher]:
        """The open watches of a resource (all versions): what a test can check pausing with."""
        return builtins.list(self._watchers[info.group_resource])

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers[watcher.group_resource].discard(watcher)

    def close_watchers(self, group_resource: GroupResource | None = None) -> None:
        for gr, watchers in self._watchers.items():
            if group_resource is None or gr == group_resource:
                for watcher in watchers:
                    watcher.close()
                watchers.clear()

    def history(self, info: ResourceInfo) -> list[Change]:
        return list(self._history[info.group_resource])

    # --- committing -------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def commit(self, gr: GroupResource, change_type: str, obj: JSON, old: JSON | None) -> JSON:
        """Store (or forget) an object under a fresh resourceVersion and tell the watchers."""
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        meta = obj["metadata"]
        key = (meta.get("namespace"), meta["name"])
        if change_type == "DELETED":
            self.objects[gr].pop(key, None)
            self.uids.pop(meta["uid"], None)
        else:
            self.objects[gr][key] = obj
            self.uids[meta["uid"]] = (gr, key)
        change = Change(rv, change_type, obj, old)
        self._history[gr].append(change)
        for watcher in self._watchers[gr]:
            watcher.offer(change)
        self._after_commit(gr, change)
        return obj

    def _after_commit(self, gr: GroupResource, change: Change) -> None:
        """CRDs change what is served; a removed object's dependents are garbage-collected."""
        if gr == ("apiextensions.k8s.io", "customresourcedefinitions"):
            if change.type == "DELETED":
                deletion.drop_custom_resources(self, change.obj)
            else:
                self.registry.set_crd(change.obj)
        if change.type == "DELETED":
            deletion.collect_dependents(self, change.obj)
            namespace = change.obj["metadata"].get("namespace")
            if namespace:
                deletion.maybe_finish_namespace(self, namespace)

    # --- creating ---------------------------------------------------------------------------

    def _check_identity(self, info: ResourceInfo, namespace: str | None, body: Any) -> JSON:
        storage = self.registry.storage_info(info.group, info.plural) or info
        return admission.identify(body, info, storage.api_version, namespace)

    def _check_namespace_open(self, namespace: str) -> None:
        ns = self.objects[("", "namespaces")].get((None, namespace))
        if ns is None:
            raise errors.not_found("namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated"
            )

    def create(
        self,
        info: ResourceInfo,
        namespace: str | None,
        body: Any,
        *,
        dry_run: bool = False,
        field_validation: str = "Warn",
    ) -> tuple[JSON, list[str]]:
        obj = self._check_identity(info, namespace, body)
        meta = obj["metadata"]
        for key in admission.SYSTEM_METADATA:
            meta.pop(key, None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._generate_name(info, meta.get("namespace"), meta["generateName"])
        admission.for_main_write(info, None, obj)
        if info.group == "" and info.plural == "namespaces":
            obj["spec"] = {"finalizers": ["kubernetes"], **(obj.get("spec") or {})}
            obj["status"] = {"phase": "Active"}
            if isinstance(meta.get("name"), str):
                meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj, warnings = admission.admit_object(
            obj,
            info,
            self.registry.validator(info, strict=False),
            field_validation=field_validation,
        )
        meta = obj["metadata"]
        if info.namespaced:
            self._check_namespace_open(meta["namespace"])
        if self.find(info, meta.get("namespace"), meta["name"]) is not None:
            raise errors.already_exists(info.qualified, meta["name"], info.group)
        if info.namespaced:
            self._check_quota(info, meta["namespace"], meta["name"])
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.timestamp()
        meta["generation"] = 1
        if dry_run:
            meta["resourceVersion"] = ""
            return obj, warnings
        return self.commit(info.group_resource, "ADDED", obj, None), warnings

    def _check_quota(self, info: ResourceInfo, namespace: str, name: str) -> None:
        quotas = [
            q
            for (ns, _), q in self.objects.get(("", "resourcequotas"), {}).items()
            if ns == namespace
        ]
        if quotas:
            stored = self.objects.get(info.group_resource, {})
            quota.check(info, name, quotas, lambda: sum(ns == namespace for ns, _ in stored))

    def _generate_name(self, info: ResourceInfo, namespace: str | None, prefix: str) -> str:
        for _ in range(100):
            name = prefix + "".join(random.choices(_NAME_SUFFIX_ALPHABET, k=5))
            if self.find(info, namespace, name) is None:
                return name
        raise errors.ApiError(
            500, "AlreadyExists", f"could not generate a unique name for {prefix}"
        )

    # --- deleting (the garbage collection lives in deletion.py) ---------------------------

    def delete(
        self,
        info: ResourceInfo,
        namespace: str | None,
        name: str,
        *,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
        grace_period: int | None = None,
    ) -> tuple[JSON, bool]:
        """DELETE one object; returns (its last state, whether it is gone already).
        `grace_period` matters for pods only (see deletion.py)."""
        obj = self.get(info, namespace, name)
        for field in ("uid", "resourceVersion"):
            wanted = (preconditions or {}).get(field)
            if wanted and wanted != obj["metadata"].get(field):
                raise errors.conflict(
                    info.qualified,
                    name,
                    info.group,
                    why=f"Precondition failed: {field} in precondition: {wanted}, "
                    f"{field} in object meta: {obj['metadata'].get(field)}",
                )
        if dry_run:
            return obj, not obj["metadata"].get("finalizers")
        return deletion.delete_object(self, info.group_resource, obj, propagation, grace_period)

    def delete_collection(
        self, info: ResourceInfo, namespace: str | None, labels: Matcher, fields: Matcher
    ) -> builtins.list[JSON]:
        targets, _, _ = self.select(info, namespace, labels, fields)
        return [deletion.delete_object(self, info.group_resource, obj, None)[0] for obj in targets]

    # --- updating ---------------------------------------------------------------------------

    def update(
        self,
        info: ResourceInfo,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Warn",
    ) -> tuple[JSON, list[str]]:
        """PUT: replace the object (or its status); stale resourceVersions are a 409."""
        old = self.get(info, namespace, name)
        candidate = self._check_identity(info, namespace, body)
        if candidate["metadata"].get("name") != name:
            raise errors.bad_request(
                f"the name of the object ({candidate['metadata'].get('name')}) does not match "
                f"the name on the URL ({name})"
            )
        sent_rv = candidate["metadata"].get("resourceVersion")
        if not sent_rv and info.custom:
            raise errors.invalid(
                info.kind,
                info.group,
                name,
                [
                    FieldError(
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )
                ],
            )
        return self._write(
            info,
            old,
            candidate,
            sent_rv,
            subresource=subresource,
            dry_run=dry_run,
            field_validation=field_validation,
        )

    def patch(
        self,
        info: ResourceInfo,
        namespace: str | None,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Warn",
        field_manager: str | None = None,
    ) -> tuple[JSON, list[str], bool]:
        """PATCH in any of the four formats; returns (object, warnings, created)."""
        old = self.find(info, namespace, name)
        if content_type == APPLY:
            if not field_manager:
                raise errors.unprocessable(
                    "PatchOptions: fieldManager: Required value: is required for apply patch"
                )
            if old is None and subresource is None:
                obj, warnings = self.create(
                    info, namespace, body, dry_run=dry_run, field_validation=field_validation
                )
                self._remember_applied(obj, field_manager, body, dry_run)
                return obj, warnings, True
        if old is None:
            raise errors.not_found(info.qualified, name, info.group)
        previous = self._applied.get((old["metadata"]["uid"], field_manager or ""), frozenset())
        candidate = patches.apply_patch(
            old, content_type, body, custom=info.custom, previously_applied=previous
        )
        if not isinstance(candidate, dict) or not isinstance(candidate.get("metadata"), dict):
            raise errors.unprocessable("the patched object must be a JSON object with metadata")
        if candidate.get("apiVersion") in (None, old["apiVersion"]):
            candidate["apiVersion"] = info.api_version  # stored under another version: no-op
        candidate = self._check_identity(info, namespace, candidate)
        if candidate["metadata"].get("name") != name:
            raise errors.bad_request("a patch cannot change the object's name")
        sent_rv = candidate["metadata"].get("resourceVersion")
        obj, warnings = self._write(
            info,
            old,
            candidate,
            sent_rv,
            subresource=subresource,
            dry_run=dry_run,
            field_validation=field_validation,
        )
        if content_type == APPLY:
            self._remember_applied(obj, field_manager or "", body, dry_run)
        return obj, warnings, False

    def _remember_applied(self, obj: JSON, manager: str, body: Any, dry_run: bool) -> None:
        if not dry_run and isinstance(body, dict) and obj["metadata"].get("uid"):
            self._applied[(obj["metadata"]["uid"], manager)] = patches.leaf_paths(body)

    def _write(
        self,
        info: ResourceInfo,
        old: JSON,
        candidate: JSON,
        sent_rv: str | None,
        *,
        subresource: str | None,
        dry_run: bool,
        field_validation: str,
    ) -> tuple[JSON, list[str]]:
        """The shared tail of PUT and PATCH: preconditions, admission, generation, commit."""
        name = old["metadata"]["name"]
        if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(info.qualified, name, info.group)
        if subresource == "status" and info.has_status:
            new = admission.for_status_write(old, candidate)
        elif subresource is None:
            new = candidate
            admission.keep_system_metadata(new, old)
            admission.for_main_write(info, old, new)
            problems = admission.finalizer_errors(old, new)
            if problems:
                raise errors.invalid(info.kind, info.group, name, problems)
        else:
            raise errors.no_such_path(f"{info.qualified}/{subresource}")
        new, warnings = admission.admit_object(
            new,
            info,
            self.registry.validator(info, strict=False),
            field_validation=field_validation,
            previous=old,
        )
        if admission.spec_part(new) != admission.spec_part(old):
            new["metadata"]["generation"] = old["metadata"].get("generation", 0) + 1
        if new == old or dry_run:
            return (old if new == old else new), warnings  # a no-op write stores nothing
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self.commit(info.group_resource, "DELETED", new, old), warnings
        return self.commit(info.group_resource, "MODIFIED", new, old), warnings


def _sort_key(item: tuple[ObjectKey, Any]) -> tuple[str, str]:
    (namespace, name), _ = item
    return (namespace or "", name)
