"""A spec whose objects Kubernetes could not store is refused naming the field (pure).

The API server refuses a ConfigMap whose data exceeds 1 MiB, and etcd refuses a request over
1.5 MiB (its default `--max-request-bytes`), which an object's status, annotations and
managedFields share with what we write. The job's config (chat templates, inline text) is the
job ConfigMap's `job.yaml`; `spec.env` is copied into every container of the RayJob (the head's
and each worker group's). These rules run wherever a spec is validated (`rlhf validate`, the
operator, the trainer); the operator also measures the objects it renders
(`rlhf_operator.builders.sizes`), so that what these rules approximate is checked exactly.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .base import Problem

if TYPE_CHECKING:
    from .job import JobSpec

CONFIG_MAP_LIMIT = 1024 * 1024
# Of the 1.5 MiB etcd takes per object, a third stays for what others write into it.
OBJECT_BUDGET = 1024 * 1024
# The job config as JSON, with room for the YAML it becomes and the pod paths put into it.
JOB_CONFIG_BUDGET = CONFIG_MAP_LIMIT - 64 * 1024
# spec.env as JSON: a RayJob holds a copy per container template (head, worker groups), and
# the kernel takes at most 128 KiB for one variable and a few MiB for all of a process's.
ENV_BUDGET = 128 * 1024


def json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def biggest_field(doc: Any, path: str) -> str:
    """The field of a manifest that holds most of its bytes: down from `doc` while one child
    holds at least half of its parent (a single chat template), else the parent (an env list
    of many values)."""
    while isinstance(doc, dict | list) and doc:
        items = list(doc.items()) if isinstance(doc, dict) else list(enumerate(doc))
        key, child = max(items, key=lambda kv: json_size(kv[1]))
        if json_size(child) * 2 < json_size(doc):
            break
        path = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"
        doc = child
    return path


def kib(size: int) -> str:
    return f"{size / 1024:.0f} KiB"


def size_problems(spec: JobSpec) -> list[Problem]:
    """Problems with paths relative to the spec."""
    from .job import JobConfig  # job.py imports this module

    problems: list[Problem] = []
    keys = set(JobConfig.model_fields)
    if _bound(spec, keys) > JOB_CONFIG_BUDGET:
        manifest = spec.to_manifest()
        config = {
            f.alias or k: manifest.get(f.alias or k) for k, f in JobConfig.model_fields.items()
        }
        size = json_size(config)
        if size > JOB_CONFIG_BUDGET:
            field = biggest_field(config, "").lstrip(".")
            problems.append(
                Problem(
                    field,
                    f"the job's config would be {kib(size)}, and its ConfigMap over Kubernetes' "
                    "1 MiB limit: keep large files (chat templates, data) in a ConfigMap or "
                    "volume of their own",
                )
            )
    if _bound(spec, {"env"}) > ENV_BUDGET:
        env = [e.to_manifest() for e in spec.env]
        size = json_size(env)
        if size > ENV_BUDGET:
            problems.append(
                Problem(
                    biggest_field(env, "env"),
                    f"spec.env is {kib(size)}, over {kib(ENV_BUDGET)}: it is copied into every "
                    "container of the RayJob, which must fit etcd's 1.5 MiB per object",
                )
            )
    return problems


# What pydantic-core's JSON may undercount against `json_size` of the manifest: a float it
# writes a character shorter (1e-5, not 1e-05), a few dozen in a spec.
_SLACK = 1024


def _bound(spec: JobSpec, fields: set[str]) -> int:
    """At least the bytes of these fields of `spec.to_manifest()` as compact JSON, measured by
    pydantic-core's serializer: microseconds, where the manifest takes milliseconds (every
    validation of a spec runs this; the operator validates each job's spec once a pass). It
    writes the nulls the manifest leaves out, so it is larger, but for the slack."""
    return len(spec.model_dump_json(include=fields, by_alias=True)) + _SLACK


def object_problems(manifest: dict[str, Any], what: str) -> list[Problem]:
    """A whole spec (an RLHFPipeline's, with all its stages) must fit one object."""
    size = json_size(manifest)
    if size <= OBJECT_BUDGET:
        return []
    return [
        Problem(
            biggest_field(manifest, "").lstrip("."),
            f"makes the {what} {kib(size)}, over {kib(OBJECT_BUDGET)}: it would not fit etcd's "
            "1.5 MiB per object with its status",
        )
    ]
