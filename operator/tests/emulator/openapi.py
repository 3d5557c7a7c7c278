"""`/openapi/v3`: the discovery of each group-version's OpenAPI document, which kubectl reads
before `apply`/`create` to learn whether the server validates fields itself (the PATCH
operation's `fieldValidation` parameter). The emulator does (custom resources against their
CRD schema, built-ins with kubernetes-validate's schemas), so kubectl sends
`fieldValidation=Strict` and leaves validation to it, as with a real server.

The documents hold paths and operations, not schemas: a client that needs schemas (e.g.
`kubectl explain`) finds none.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from . import errors
from .resources import Registry, ResourceInfo

JSON = dict[str, Any]
_PARAMS = [
    {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
    for name in ("dryRun", "fieldManager", "fieldValidation")
]


def _key(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _operations(info: ResourceInfo) -> dict[str, JSON]:
    gvk = {"group": info.group, "version": info.version, "kind": info.kind}
    base = f"/{_key(info.group, info.version)}"
    if info.namespaced:
        base += "/namespaces/{namespace}"
    collection, item = f"{base}/{info.plural}", f"{base}/{info.plural}/{{name}}"

    def op(action: str) -> JSON:
        return {
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
            "parameters": _PARAMS,
            "responses": {"200": {"description": "OK"}},
        }

    return {
        collection: {"post": op("post")},
        item: {"put": op("put"), "patch": op("patch")},
    }


def index(registry: Registry) -> JSON:
    """GET /openapi/v3: one entry per served group-version, with a content hash."""
    paths = {}
    for group, version in sorted({(i.group, i.version) for i in registry.all()}):
        digest = hashlib.sha256(json.dumps(document(registry, group, version)).encode())
        url = f"/openapi/v3/{_key(group, version)}?hash={digest.hexdigest()[:32].upper()}"
        paths[_key(group, version)] = {"serverRelativeURL": url}
    return {"paths": paths}


def document(registry: Registry, group: str, version: str) -> JSON:
    infos = registry.in_group_version(group, version)
    if not infos:
        raise errors.no_such_path(f"/openapi/v3/{_key(group, version)}")
    paths: JSON = {}
    for info in sorted(infos, key=lambda i: i.plural):
        paths.update(_operations(info))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.34.0-rlhf-emulator"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def serve(registry: Registry, parts: list[str]) -> JSON:
    """`parts` of a path under /openapi: ["v3"], ["v3", "api", "v1"], ["v3", "apis", g, v]."""
    if parts == ["v3"]:
        return index(registry)
    if len(parts) == 3 and parts[:2] == ["v3", "api"]:
        return document(registry, "", parts[2])
    if len(parts) == 4 and parts[:2] == ["v3", "apis"]:
        return document(registry, parts[2], parts[3])
    raise errors.no_such_path("/openapi/" + "/".join(parts))
