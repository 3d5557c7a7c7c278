"""`rlhf-operator render FILE`: every child object of each RLHFJob in a file, as YAML.

A dry run for GitOps review and debugging: the same validation, placement plan and builders
the operator runs, with no cluster. Objects the API server would fill in (the owner's uid) get
a visible placeholder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlhf_trainer.config import cluster_problems, load_file

from .api.v1alpha1 import RLHFJob
from .builders.children import render_children
from .builders.common import BuildError
from .placement import PlacementError
from .policy import policy_problems
from .settings import OperatorSettings

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class Rendered:
    source: str
    name: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def render_job(job: RLHFJob, settings: OperatorSettings) -> list[dict[str, Any]]:
    """Children in apply order. Raises PlacementError / BuildError."""
    return render_children(job, settings).all


def render_file(
    path: str | Path, settings: OperatorSettings, *, namespace: str | None = None
) -> list[Rendered]:
    """Each document's children; `namespace` overrides the manifests' metadata.namespace
    (default: theirs, else "default")."""
    out: list[Rendered] = []
    loaded_jobs = load_file(path)
    namespaces = _document_namespaces(path, len(loaded_jobs))
    for loaded, doc_namespace in zip(loaded_jobs, namespaces, strict=True):
        if not loaded.ok or loaded.spec is None:
            problems = loaded.problems or ["not an RLHFJob manifest (bare job configs run locally)"]
            out.append(Rendered(loaded.source, loaded.name, problems=problems))
            continue
        if not loaded.is_manifest:
            out.append(
                Rendered(
                    loaded.source,
                    loaded.name,
                    problems=["<root>: a bare job config; render needs an RLHFJob manifest"],
                )
            )
            continue
        # The operator refuses what no pod can run (a file of the author's machine): so does
        # the dry run.
        cluster = [p.render("spec") for p in cluster_problems(loaded.spec)]
        # ...and what the platform's policy (these settings) does not allow.
        cluster += policy_problems(loaded.spec, settings)
        if cluster:
            out.append(Rendered(loaded.source, loaded.name, problems=cluster))
            continue
        job = RLHFJob(
            metadata={
                "name": loaded.name,
                "namespace": namespace or doc_namespace or "default",
                "uid": PLACEHOLDER_UID,
            },
            spec=loaded.spec,
        )
        try:
            objects = render_job(job, settings)
        except (PlacementError, BuildError) as err:
            out.append(Rendered(loaded.source, loaded.name, problems=[str(err)]))
            continue
        out.append(Rendered(loaded.source, loaded.name, objects=objects))
    return out


def _document_namespaces(path: str | Path, count: int) -> list[str | None]:
    """metadata.namespace of each non-empty document (load_file skips the same empty ones)."""
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    except (OSError, yaml.YAMLError):
        return [None] * count
    found: list[str | None] = []
    for doc in docs:
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        ns = meta.get("namespace") if isinstance(meta, dict) else None
        found.append(str(ns) if ns else None)
    return found if len(found) == count else [None] * count


class _ReviewDumper(yaml.SafeDumper):
    """Multi-line strings (the ConfigMap's job.yaml) as literal blocks, readable in review."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ReviewDumper.add_representer(str, _str_representer)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_ReviewDumper, sort_keys=False, default_flow_style=False)
