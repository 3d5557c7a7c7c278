"""The client that talks to the Kubernetes API (besides kopf itself): a small asyncio client
on aiohttp with kopf's own credentials (service account in a cluster, else the kubeconfig).
Applying children on top of it is `apply.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp
import kopf

from ..builders.encoding import compact, decode
from .throttle import TokenBucket

logger = logging.getLogger(__name__)

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# Server-side apply (JSON is YAML); the field manager names us in managedFields.
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "rlhf-operator"
MANAGER = {"fieldManager": FIELD_MANAGER}
# Metadata only (the server strips the rest): how the operator looks at an existing Secret,
# so that it never holds a token it did not need. Plain JSON where the server cannot.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

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


def _error_body(raw: bytes) -> Any:
    """A refusal's `Status` object, or its text when it is not JSON (a proxy's page)."""
    try:
        return decode(raw) or raw.decode(errors="replace")
    except ValueError:
        return raw.decode(errors="replace")


class KubeApi:
    """JSON over HTTP with one re-login on 401 (rotated service-account tokens)."""

    def __init__(
        self,
        connect: Callable[[], kopf.ConnectionInfo],
        on_request: RequestHook | None = None,
        *,
        throttle: TokenBucket | None = None,
    ) -> None:
        self._connect = connect
        self._on_request = on_request
        self._throttle = throttle
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
        if self._throttle is not None:
            await self._throttle.acquire()
        for attempt in range(2):
            if self._session is None:
                self._session = self._open()
            data = compact(body) if body is not None else None
            if data is not None:
                headers["Content-Type"] = content_type
            async with self._session.request(
                method,
                self._server + path,
                data=data,
                params=params,
                headers=headers or None,
            ) as response:
                raw = await response.read()
                if self._on_request is not None:
                    self._on_request(method, kind, response.status)
                if response.status == 401 and attempt == 0:
                    await self.close()  # re-login: the token may have been rotated
                    continue
                if response.status >= 400:
                    raise ApiError(response.status, method, path, _error_body(raw))
                return decode(raw) if raw else None
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
        created: JSON = await self.request(
            "POST", path_of(obj, named=False), obj, params=MANAGER, kind=obj["kind"]
        )
        return created

    async def apply(self, obj: Mapping[str, Any]) -> JSON:
        """Server-side apply as `rlhf-operator`, forcing ownership of the fields it sets
        (creates the object when it does not exist)."""
        applied: JSON = await self.request(
            "PATCH",
            path_of(obj),
            obj,
            content_type=APPLY_PATCH,
            params={**MANAGER, "force": "true"},
            kind=obj["kind"],
        )
        return applied

    async def patch(self, obj: Mapping[str, Any], patch: Mapping[str, Any]) -> JSON:
        """Merge-patch the object itself (not its status)."""
        patched: JSON = await self.request(
            "PATCH", path_of(obj), patch, content_type=MERGE_PATCH, kind=obj["kind"]
        )
        return patched

    async def json_patch(self, obj: Mapping[str, Any], ops: Sequence[JSON]) -> JSON:
        """A JSON patch (RFC 6902) of the object itself: `test` operations make it conditional."""
        patched: JSON = await self.request(
            "PATCH", path_of(obj), ops, content_type=JSON_PATCH, kind=obj["kind"]
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
