"""A deliberately tiny HTTP client for CRD-level proofs against the test apiserver.

Objects are addressed by their manifest: any dict with `apiVersion`, `kind`, `metadata.name`
(and `metadata.namespace`, default "default") is a reference. Kinds become URL paths through the
CRDs installed with `apply_crd` (the server has no `/apis` discovery list to ask instead).
Every call returns an `ApiResult` carrying the server's own verdict (status code, message,
`details.causes`); nothing is raised for a rejection, so tests can assert on it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from .server import RunningApiServer

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ESTABLISH_TIMEOUT_S = 30.0
PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}
Manifest = dict[str, Any]
WARNING_TEXT = re.compile(r'\d{3} [^ ]+ "((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Cause:
    """One entry of a Status's `details.causes`: `field` is e.g. `spec.entrypoint`."""

    field: str
    reason: str
    message: str


@dataclass(frozen=True)
class ApiResult:
    ok: bool
    status: int
    message: str
    causes: tuple[Cause, ...] = ()
    body: Manifest = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def fields(self) -> list[str]:
        return [cause.field for cause in self.causes]

    def raise_for_error(self) -> Manifest:
        """Returns the response body; raises with the server's message when the call failed."""
        if not self.ok:
            raise ApiError(self)
        return self.body

    def __str__(self) -> str:
        causes = "".join(f"\n  - {c.field}: {c.message} ({c.reason})" for c in self.causes)
        return f"HTTP {self.status}: {self.message}{causes}"


class ApiError(Exception):
    def __init__(self, result: ApiResult) -> None:
        super().__init__(str(result))
        self.result = result


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool

    def collection_path(self, namespace: str) -> str:
        base = f"/apis/{self.group}/{self.version}"
        return f"{base}/namespaces/{namespace}/{self.plural}" if self.namespaced else (
            f"{base}/{self.plural}"
        )  # fmt: skip


def _parse_warnings(header: str) -> tuple[str, ...]:
    """Texts of `Warning: 299 - "..."` headers (requests joins repeated headers with ", ")."""
    return tuple(re.sub(r"\\(.)", r"\1", text) for text in WARNING_TEXT.findall(header))


def _to_result(response: requests.Response) -> ApiResult:
    try:
        body = response.json()
    except ValueError:
        body = {"message": response.text}
    if not isinstance(body, dict):
        body = {"items": body}
    warnings = _parse_warnings(response.headers.get("Warning", ""))
    ok = 200 <= response.status_code < 300
    causes = tuple(
        Cause(c.get("field", ""), c.get("reason", ""), c.get("message", ""))
        for c in (body.get("details") or {}).get("causes", [])
    )
    message = "" if ok else str(body.get("message", response.reason))
    return ApiResult(ok, response.status_code, message, causes, body, warnings)


def load_manifests(path: Path) -> list[Manifest]:
    """All non-empty YAML documents in `path`."""
    with path.open() as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc]


class ApiClient:
    def __init__(self, server: RunningApiServer) -> None:
        self.server = server
        self.session = requests.Session()
        # Ignore REQUESTS_CA_BUNDLE and proxy variables: they would override our CA per request
        # and could send loopback traffic through a proxy.
        self.session.trust_env = False
        self.session.verify = str(server.pki.ca_cert)
        self.session.cert = (str(server.pki.client_cert), str(server.pki.client_key))
        self._resources: dict[tuple[str, str], Resource] = {}

    # --- raw -------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> ApiResult:
        data = None
        if body is not None:
            data = yaml.safe_dump(body) if content_type.endswith("yaml") else None
        response = self.session.request(
            method,
            self.server.url + path,
            params=params,
            json=body if body is not None and data is None else None,
            data=data,
            headers={"Content-Type": content_type} if body is not None else None,
            timeout=60,
        )
        return _to_result(response)

    # --- CRDs ------------------------------------------------------------------------------
    def apply_crd(self, source: Path | Manifest) -> ApiResult:
        """Creates or replaces a CRD (a file path or a dict) and waits until it is Established
        and its resource answers. Returns the server's verdict on the CRD itself."""
        crd = load_manifests(source)[0] if isinstance(source, Path) else source
        result = self.request("POST", CRD_PATH, crd)
        if result.status == 409:  # already installed: replace it
            current = self.request("GET", f"{CRD_PATH}/{crd['metadata']['name']}")
            replacement = {**crd, "metadata": {**crd["metadata"]}}
            replacement["metadata"]["resourceVersion"] = current.body["metadata"]["resourceVersion"]
            result = self.request("PUT", f"{CRD_PATH}/{crd['metadata']['name']}", replacement)
        if not result.ok:
            return result
        established = self._wait_established(crd["metadata"]["name"])
        self._register(established)
        return ApiResult(True, result.status, "", (), established, result.warnings)

    def _wait_established(self, name: str) -> Manifest:
        deadline = time.monotonic() + ESTABLISH_TIMEOUT_S
        conditions: list[Manifest] = []
        while time.monotonic() < deadline:
            crd = self.request("GET", f"{CRD_PATH}/{name}").raise_for_error()
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                # Established can precede the handler serving the new resource by a moment.
                resource = _resource_of(crd, _storage_version(crd))
                if self.request("GET", resource.collection_path("default")).ok:
                    return crd
            time.sleep(0.1)
        raise TimeoutError(f"CRD {name} not Established after {ESTABLISH_TIMEOUT_S}s: {conditions}")

    def _register(self, crd: Manifest) -> None:
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                api_version = f"{spec['group']}/{version['name']}"
                self._resources[(api_version, spec["names"]["kind"])] = _resource_of(
                    crd, version["name"]
                )

    def resource(self, api_version: str, kind: str) -> Resource:
        try:
            return self._resources[(api_version, kind)]
        except KeyError:
            known = ", ".join(f"{a} {k}" for a, k in self._resources) or "none"
            raise KeyError(
                f"{api_version} {kind} is not served: install its CRD with apply_crd() first "
                f"(installed: {known})"
            ) from None

    def installed_kinds(self) -> list[tuple[str, str]]:
        return list(self._resources)

    # --- custom objects --------------------------------------------------------------------
    def _path(self, ref: Manifest, *, named: bool = True, subresource: str | None = None) -> str:
        meta = ref.get("metadata", {})
        path = self.resource(ref["apiVersion"], ref["kind"]).collection_path(
            meta.get("namespace", "default")
        )
        if named:
            path += f"/{meta['name']}"
        return f"{path}/{subresource}" if subresource else path

    @staticmethod
    def _write_params(
        dry_run: bool, strict: bool, field_manager: str | None = None
    ) -> dict[str, str]:
        params = {"fieldValidation": "Strict" if strict else "Warn"}
        if dry_run:
            params["dryRun"] = "All"
        if field_manager:
            params["fieldManager"] = field_manager
        return params

    def create(
        self, manifest: Manifest, *, dry_run: bool = False, strict: bool = True
    ) -> ApiResult:
        """POSTs `manifest`. strict=True: unknown fields are rejected instead of pruned."""
        return self.request(
            "POST", self._path(manifest, named=False), manifest,
            params=self._write_params(dry_run, strict),
        )  # fmt: skip

    def get(self, ref: Manifest) -> ApiResult:
        return self.request("GET", self._path(ref))

    def list_objects(
        self, api_version: str, kind: str, namespace: str = "default"
    ) -> list[Manifest]:
        path = self.resource(api_version, kind).collection_path(namespace)
        items: list[Manifest] = self.request("GET", path).raise_for_error()["items"]
        return items

    def update(
        self,
        obj: Manifest,
        *,
        dry_run: bool = False,
        strict: bool = True,
        subresource: str | None = None,
    ) -> ApiResult:
        """PUTs the whole object; keep metadata.resourceVersion to get real conflict checks."""
        return self.request(
            "PUT", self._path(obj, subresource=subresource), obj,
            params=self._write_params(dry_run, strict),
        )  # fmt: skip

    def update_status(self, obj: Manifest, *, dry_run: bool = False) -> ApiResult:
        return self.update(obj, dry_run=dry_run, subresource="status")

    def patch(
        self,
        ref: Manifest,
        patch: Any,
        *,
        patch_type: str = "merge",
        dry_run: bool = False,
        strict: bool = True,
        subresource: str | None = None,
    ) -> ApiResult:
        """patch_type: "merge" (RFC 7386), "json" (RFC 6902 list) or "apply" (server-side)."""
        if patch_type not in PATCH_CONTENT_TYPES:
            raise ValueError(f"patch_type must be one of {sorted(PATCH_CONTENT_TYPES)}")
        manager = "rlhf-operator-tests" if patch_type == "apply" else None
        return self.request(
            "PATCH", self._path(ref, subresource=subresource), patch,
            params=self._write_params(dry_run, strict, manager),
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )  # fmt: skip

    def delete(self, ref: Manifest, *, dry_run: bool = False) -> ApiResult:
        return self.request(
            "DELETE", self._path(ref), params={"dryRun": "All"} if dry_run else None
        )

    def delete_all(self, api_version: str, kind: str, namespace: str = "default") -> None:
        """Deletes every object of a kind in `namespace`, finalizers included."""
        path = self.resource(api_version, kind).collection_path(namespace)
        self.request("DELETE", path).raise_for_error()
        for obj in self.list_objects(api_version, kind, namespace):  # only those held by finalizers
            self.patch(obj, {"metadata": {"finalizers": None}})

    def delete_all_custom_objects(self, namespace: str = "default") -> None:
        for api_version, kind in self.installed_kinds():
            self.delete_all(api_version, kind, namespace)


def _storage_version(crd: Manifest) -> str:
    for version in crd["spec"]["versions"]:
        if version.get("storage"):
            return str(version["name"])
    return str(crd["spec"]["versions"][0]["name"])


def _resource_of(crd: Manifest, version: str) -> Resource:
    spec = crd["spec"]
    return Resource(
        group=spec["group"],
        version=version,
        plural=spec["names"]["plural"],
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
    )
