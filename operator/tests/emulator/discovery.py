"""Discovery documents: `/api`, `/api/v1`, `/apis`, `/apis/<group>[/<version>]`, `/version`."""

from __future__ import annotations

from typing import Any

from . import errors
from .resources import Registry, ResourceInfo

JSON = dict[str, Any]

SERVER_VERSION: JSON = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0-rlhf-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions() -> JSON:
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}


def _group_entry(group: str, versions: list[str]) -> JSON:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def api_group_list(registry: Registry) -> JSON:
    groups = [_group_entry(g, vs) for g, vs in registry.groups().items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> JSON:
    versions = registry.groups().get(group)
    if not versions:
        raise errors.no_such_path(f"/apis/{group}")
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, versions)}


def _resource_entries(info: ResourceInfo) -> list[JSON]:
    main: JSON = {
        "name": info.plural,
        "singularName": info.singular,
        "namespaced": info.namespaced,
        "kind": info.kind,
        "verbs": list(info.verbs),
    }
    if info.short_names:
        main["shortNames"] = list(info.short_names)
    if info.categories:
        main["categories"] = list(info.categories)
    entries = [main]
    for sub in sorted(info.subresources):
        verbs = (
            ["get", "patch", "update"]
            if sub in ("status", "scale")
            else ["get"]
            if sub == "log"
            else ["create"]
            if sub in ("eviction", "token")
            else ["update"]
        )
        kind = {"scale": "Scale", "eviction": "Eviction", "token": "TokenRequest"}.get(
            sub, info.kind
        )
        entries.append(
            {
                "name": f"{info.plural}/{sub}",
                "singularName": "",
                "namespaced": info.namespaced,
                "kind": kind,
                "verbs": verbs,
            }
        )
    return entries


def api_resource_list(registry: Registry, group: str, version: str) -> JSON:
    infos = registry.in_group_version(group, version)
    if not infos:
        prefix = f"/apis/{group}" if group else "/api"
        raise errors.no_such_path(f"{prefix}/{version}")
    resources = [
        e for info in sorted(infos, key=lambda i: i.plural) for e in _resource_entries(info)
    ]
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def root_paths(registry: Registry) -> JSON:
    paths = {"/api", "/api/v1", "/apis", "/version", "/healthz", "/livez", "/readyz"}
    for group, versions in registry.groups().items():
        paths.add(f"/apis/{group}")
        paths.update(f"/apis/{group}/{v}" for v in versions)
    return {"paths": sorted(paths)}
