"""Every object we create fits what Kubernetes stores, or the spec is refused naming the field
that makes it too big (pure). `rlhf_trainer.config.sizes` refuses such specs before they are
rendered; this measures what was rendered, exactly."""

from __future__ import annotations

from rlhf_trainer.config.sizes import CONFIG_MAP_LIMIT, OBJECT_BUDGET, biggest_field, kib

from ..api.v1alpha1 import RLHFJob
from .common import JSON, BuildError
from .encoding import size as json_size


def config_map_bytes(obj: JSON) -> int:
    """What the API server counts against a ConfigMap's 1 MiB: keys and values."""
    data = obj.get("data") or {}
    binary = obj.get("binaryData") or {}
    return sum(len(k) + len(str(v).encode()) for k, v in (*data.items(), *binary.items()))


def check_sizes(job: RLHFJob, objects: list[JSON]) -> None:
    """BuildError naming the spec field behind the first object that Kubernetes would not
    store."""
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "ConfigMap" and config_map_bytes(obj) > CONFIG_MAP_LIMIT:
            raise BuildError(
                biggest_field(job.spec.to_manifest(), "spec"),
                f"makes the ConfigMap {name} {kib(config_map_bytes(obj))}, over Kubernetes' "
                "1 MiB limit for a ConfigMap",
            )
        size = json_size(obj)
        if size > OBJECT_BUDGET:
            raise BuildError(
                biggest_field(job.spec.to_manifest(), "spec"),
                f"makes the {kind} {name} {kib(size)}, over {kib(OBJECT_BUDGET)}: it would not "
                "fit etcd's 1.5 MiB per object with its status",
            )
