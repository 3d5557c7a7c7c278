"""core/v1 Events posted by the substrate's controllers (kubelet, KubeRay, ...), aggregated like
client-go's recorder: a repeat of the same reason and message bumps `count`."""

from __future__ import annotations

import datetime
import secrets
from typing import Any

from emulator import ApiError, Emulator

JSON = dict[str, Any]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Recorder:
    def __init__(self, api: Emulator, component: str, host: str = "") -> None:
        self.api = api
        self.component = component
        self.host = host
        self._seen: dict[tuple[str, str, str], str] = {}

    def record(self, obj: JSON, kind: str, event_type: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid", ""), reason, message)
        stamp = now()
        try:
            name = self._seen.get(key)
            existing = self.api.find("v1/events", name, namespace) if name else None
            if name and existing is not None:
                count = int(existing.get("count") or 1) + 1
                self.api.patch(
                    "v1/events", name, {"count": count, "lastTimestamp": stamp}, namespace
                )
                return
            name = f"{meta['name']}.{secrets.token_hex(8)}"
            source: JSON = {"component": self.component}
            if self.host:
                source["host"] = self.host
            self.api.create(
                "v1/events",
                {
                    "metadata": {"name": name, "namespace": namespace},
                    "involvedObject": {
                        "apiVersion": obj.get("apiVersion", "v1"),
                        "kind": kind,
                        "name": meta["name"],
                        "namespace": namespace,
                        "uid": meta.get("uid", ""),
                    },
                    "reason": reason,
                    "message": message,
                    "type": event_type,
                    "source": source,
                    "reportingComponent": self.component,
                    "reportingInstance": self.host,
                    "firstTimestamp": stamp,
                    "lastTimestamp": stamp,
                    "count": 1,
                },
                namespace,
            )
            self._seen[key] = name
        except ApiError:
            pass  # the namespace is going away: events are best effort, as in client-go
