"""Helpers for the emulator's own tests: a test CRD exercising the schema extensions, and a
small HTTP client that returns status, body and headers without raising."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

GROUP = "emulator-test.rlhf.dev"
WIDGETS = f"widgets.{GROUP}"

_WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                "port": {"x-kubernetes-int-or-string": True},
                "note": {"type": "string", "nullable": True},
                "limits": {"type": "object", "additionalProperties": {"type": "string"}},
                "tags": {
                    "type": "array",
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "set",
                },
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "number": {"type": "integer"}},
                    },
                },
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {
                        "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}
                    },
                },
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": {"type": "string"},
                "observedGeneration": {"type": "integer"},
            },
        },
    },
}


def widget_crd(*, status_subresource: bool = True) -> dict[str, Any]:
    """Served as v1 (storage) and v1beta1, like a CRD in the middle of a version migration."""
    versions = []
    for name, storage in (("v1", True), ("v1beta1", False)):
        versions.append(
            {
                "name": name,
                "served": True,
                "storage": storage,
                "schema": {"openAPIV3Schema": _WIDGET_SCHEMA},
                "subresources": {"status": {}} if status_subresource else {},
                "additionalPrinterColumns": [
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
            }
        )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": WIDGETS},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "shortNames": ["wd"],
                "categories": ["all"],
            },
            "versions": versions,
        },
    }


def widget(name: str, size: int = 1, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": size, **spec},
    }


def widgets_path(namespace: str | None = "default", name: str | None = None) -> str:
    path = f"/apis/{GROUP}/v1"
    path += f"/namespaces/{namespace}/widgets" if namespace else "/widgets"
    return path + (f"/{name}" if name else "")


@dataclass
class Reply:
    status: int
    body: Any
    headers: CIMultiDictProxy[str]


class Api:
    """Raw HTTP against the emulator: what any client library would send."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        data = None
        if body is not None:
            data = body if isinstance(body, str) else json.dumps(body)
        all_headers = {"Content-Type": content_type, **(headers or {})}
        async with self.session.request(
            method, self.base + path, data=data, params=params, headers=all_headers
        ) as response:
            text = await response.text()
            parsed = json.loads(text) if text and text[0] in "{[" else text
            return Reply(response.status, parsed, response.headers)

    async def get(self, path: str, **params: str) -> Reply:
        return await self.request("GET", path, params=params or None)

    async def post(self, path: str, body: Any, **params: str) -> Reply:
        return await self.request("POST", path, body, params=params or None)

    async def put(self, path: str, body: Any, **params: str) -> Reply:
        return await self.request("PUT", path, body, params=params or None)

    async def patch(
        self,
        path: str,
        body: Any,
        content_type: str = "application/merge-patch+json",
        **params: str,
    ) -> Reply:
        return await self.request(
            "PATCH", path, body, content_type=content_type, params=params or None
        )

    async def delete(self, path: str, body: Any = None, **params: str) -> Reply:
        return await self.request("DELETE", path, body, params=params or None)

    async def watch(
        self, path: str, *, count: int, timeout: float = 5.0, **params: str
    ) -> list[dict[str, Any]]:
        """Read `count` watch events (or until the server ends the stream)."""
        events: list[dict[str, Any]] = []
        query = {"watch": "true", **params}
        async with self.session.get(self.base + path, params=query) as response:
            if response.status != 200:
                raise AssertionError(f"watch failed: {response.status} {await response.text()}")

            async def read() -> None:
                async for line in response.content:
                    if line.strip():
                        events.append(json.loads(line))
                    if len(events) >= count:
                        return

            await asyncio.wait_for(read(), timeout)
        return events
