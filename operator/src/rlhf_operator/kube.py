"""The only module that talks to the Kubernetes API (besides kopf itself).

A small asyncio client on aiohttp with kopf's own credentials (service account in a cluster,
else the kubeconfig), plus `apply`: create a child, or replace it when it differs from what is
desired. Only a child the job provably owns is ever changed: one with a controller reference
to this job's UID, or (a retained PVC, which has none by design) our label and this job's UID
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
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import aiohttp
import kopf

from .api.v1alpha1 import GROUP
from .builders.common import JOB_UID_ANNOTATION, MANAGED_BY_LABEL
from .desired import Desired
from .settings import OPERATOR_NAME

logger = logging.getLogger(__name__)

JSON = dict[str, Any]
HASH_ANNOTATION = f"{GROUP}/desired-hash"
MERGE_PATCH = "application/merge-patch+json"
# Metadata only (the server strips the rest): how the operator looks at an existing Secret,
# so that it never holds a token it did not need. Plain JSON where the server cannot.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
# Random values of `Desired.generated` keys: 32 bytes, URL-safe (a Ray token, for one).
TOKEN_BYTES = 32

# kind -> (api path prefix without namespace, plural)
_RESOURCES = {
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("v1", "Secret"): "secrets",
    ("v1", "Pod"): "pods",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("ray.io/v1", "RayJob"): "rayjobs",
    ("rlhf.dev/v1alpha1", "RLHFJob"): "rlhfjobs",
    ("rlhf.dev/v1alpha1", "RLHFPipeline"): "rlhfpipelines",
}


class ApiError(Exception):
    """A non-2xx answer. `transient`: worth retrying as is (server trouble, conflicts)."""

    def __init__(self, status: int, method: str, path: str, body: Any) -> None:
        said = body.get("message") if isinstance(body, dict) else None
        self.message = str(said) if said else str(body)[:300]
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        """The `Status` reason (NotFound, Forbidden, Invalid, ...), else the HTTP code."""
        said = self.body.get("reason") if isinstance(self.body, dict) else None
        return str(said) if said else str(self.status)

    @property
    def transient(self) -> bool:
        return self.status in {409, 429} or self.status >= 500


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    plural = _RESOURCES.get((api_version, kind))
    if plural is None:
        raise ValueError(f"no API path known for {api_version} {kind}")
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


def path_of(obj: Mapping[str, Any], *, named: bool = True) -> str:
    meta = obj["metadata"]
    return object_path(
        obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"] if named else None
    )


def login(settings: kopf.OperatorSettings | None = None) -> kopf.ConnectionInfo:
    """kopf's public login helpers: in-cluster service account first, then the kubeconfig
    ($KUBECONFIG, read now rather than at import time)."""
    kopf_settings = settings or kopf.OperatorSettings()
    info = kopf.login_with_service_account(settings=kopf_settings) or kopf.login_with_kubeconfig(
        settings=kopf_settings
    )
    if info is None:
        raise kopf.LoginError(
            "no credentials: not in a cluster (no service account token) and no kubeconfig "
            "(set KUBECONFIG or create ~/.kube/config)"
        )
    return info


RequestHook = Callable[[str, str, int], None]


class KubeApi:
    """JSON over HTTP with one re-login on 401 (rotated service-account tokens)."""

    def __init__(
        self, connect: Callable[[], kopf.ConnectionInfo], on_request: RequestHook | None = None
    ) -> None:
        self._connect = connect
        self._on_request = on_request
        self._session: aiohttp.ClientSession | None = None
        self._server = ""

    def _open(self) -> aiohttp.ClientSession:
        info = self._connect()
        self._server = info.server.rstrip("/")
        headers = {**info.as_http_headers(), "User-Agent": "rlhf-operator"}
        connector = aiohttp.TCPConnector(limit=64, ssl=info.as_ssl_context())
        return aiohttp.ClientSession(
            connector=connector, headers=headers, timeout=aiohttp.ClientTimeout(total=60)
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        kind: str = "",
        accept: str | None = None,
    ) -> Any:
        """The decoded JSON answer; raises ApiError for non-2xx answers."""
        headers = {"Accept": accept} if accept is not None else {}
        for attempt in range(2):
            if self._session is None:
                self._session = self._open()
            data = json.dumps(body) if body is not None else None
            if data is not None:
                headers["Content-Type"] = content_type
            async with self._session.request(
                method,
                self._server + path,
                data=data,
                params=params,
                headers=headers or None,
            ) as response:
                text = await response.text()
                if self._on_request is not None:
                    self._on_request(method, kind, response.status)
                if response.status == 401 and attempt == 0:
                    await self.close()  # re-login: the token may have been rotated
                    continue
                parsed = json.loads(text) if text else None
                if response.status >= 400:
                    raise ApiError(response.status, method, path, parsed or text)
                return parsed
        raise AssertionError("unreachable")

    async def get(self, obj: Mapping[str, Any], *, metadata_only: bool = False) -> JSON | None:
        accept = METADATA_ONLY if metadata_only else None
        try:
            found: JSON = await self.request("GET", path_of(obj), kind=obj["kind"], accept=accept)
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        return found

    async def list(
        self, api_version: str, kind: str, namespace: str, *, label_selector: str
    ) -> list[JSON]:
        path = object_path(api_version, kind, namespace)
        found = await self.request("GET", path, params={"labelSelector": label_selector}, kind=kind)
        items: list[JSON] = (found or {}).get("items") or []
        return items

    async def create(self, obj: Mapping[str, Any]) -> JSON:
        created: JSON = await self.request("POST", path_of(obj, named=False), obj, kind=obj["kind"])
        return created

    async def replace(self, obj: Mapping[str, Any]) -> JSON:
        replaced: JSON = await self.request("PUT", path_of(obj), obj, kind=obj["kind"])
        return replaced

    async def patch(self, obj: Mapping[str, Any], patch: Mapping[str, Any]) -> JSON:
        """Merge-patch the object itself (not its status)."""
        patched: JSON = await self.request(
            "PATCH", path_of(obj), patch, content_type=MERGE_PATCH, kind=obj["kind"]
        )
        return patched

    async def patch_status(self, obj: Mapping[str, Any], patch: Mapping[str, Any]) -> JSON | None:
        """Merge-patch the status subresource; None when the object is gone."""
        try:
            patched: JSON = await self.request(
                "PATCH",
                path_of(obj) + "/status",
                {"status": patch},
                content_type=MERGE_PATCH,
                kind=obj["kind"],
            )
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        return patched

    async def delete(self, obj: Mapping[str, Any]) -> bool:
        """Delete in the background (dependents are collected); False when already gone."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        try:
            await self.request("DELETE", path_of(obj), body, kind=obj["kind"])
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True


# --- apply ---------------------------------------------------------------------------------


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
