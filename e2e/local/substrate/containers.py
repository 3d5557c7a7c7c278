"""A container's record in a pod worker, and what the pod's status says about containers (pure):
container statuses as the kubelet reports them, and the pod's QoS class."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import images, podspec

JSON = dict[str, Any]
WAITING = {"waiting": {"reason": "ContainerCreating"}}


@dataclass
class Ctr:
    spec: JSON
    init: bool
    image: images.LocalImage | None = None
    restarts: int = 0
    state: JSON = field(default_factory=lambda: dict(WAITING))
    last_state: JSON = field(default_factory=dict)
    ready: bool = False
    process: asyncio.subprocess.Process | None = None
    directory: Path | None = None
    ids: tuple[int, int] = (0, 0)
    restart_at: float | None = None  # monotonic time of the next (re)start
    done: bool = False  # terminated and not to be restarted
    probes: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self, pod_uid: str) -> JSON:
        running = "running" in self.state
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": self.image.digest if self.image else "",
            "containerID": f"substrate://{pod_uid[:8]}-{self.name}-{self.restarts}",
            "ready": self.ready and running,
            "started": running,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last_state,
        }


def qos_class(pod: JSON) -> str:
    containers = [*(pod["spec"].get("initContainers") or []), *pod["spec"].get("containers", [])]
    requests = [c.get("resources", {}).get("requests") or {} for c in containers]
    limits = [c.get("resources", {}).get("limits") or {} for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(
        lim.get(k) is not None and podspec.quantity(req.get(k, lim[k])) == podspec.quantity(lim[k])
        for req, lim in zip(requests, limits, strict=True)
        for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"
