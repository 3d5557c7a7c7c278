"""Read job files: bare job configs or full RLHFJob manifests, YAML or JSON, many documents."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .documents import DocumentError, document_problems, quote, read_documents
from .errors import validation_messages
from .job import JobConfig, JobSpec
from .names import DNS_LABEL
from .pipeline import PIPELINE_KIND, PipelineSpec, name_problems, validate_pipeline_spec

API_GROUP = "rlhf.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "RLHFJob"
# Children are named "<job>-<suffix>" and KubeRay derives pod and service names from the
# RayJob's name, so job names must be DNS-1035 labels with room to spare.
NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX_LENGTH = 40
# A namespace is an RFC 1123 label (the API server refuses anything else).
NAMESPACE_PATTERN = re.compile(DNS_LABEL)


@dataclass(frozen=True)
class LoadedJob:
    """One document: its run name, where it came from, and the validated config or errors."""

    name: str
    source: str
    base_dir: Path
    is_manifest: bool
    spec: JobSpec | None = None
    config: JobConfig | None = None
    problems: list[str] = field(default_factory=list)
    # An RLHFPipeline manifest: its stages instead of one job's spec and config.
    pipeline: PipelineSpec | None = None
    # A manifest's metadata.namespace, when it names one.
    namespace: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def kind(self) -> str:
        if self.pipeline is not None:
            return PIPELINE_KIND
        return KIND if self.is_manifest else "job config"


def _name_problems(metadata: Any) -> list[str]:
    if not isinstance(metadata, dict) or not metadata.get("name"):
        return ["metadata.name: required field is missing"]
    problems = []
    name = metadata["name"]
    if not isinstance(name, str) or len(name) > NAME_MAX_LENGTH or not NAME_PATTERN.match(name):
        problems.append(
            f"metadata.name: must be a DNS-1035 label of at most {NAME_MAX_LENGTH} characters "
            f"(lowercase letters, digits and '-', starting with a letter); got {quote(name)}"
        )
    namespace = metadata.get("namespace")
    if namespace is not None and not (
        isinstance(namespace, str) and NAMESPACE_PATTERN.match(namespace)
    ):
        problems.append(
            "metadata.namespace: must be an RFC 1123 label of at most 63 characters (lowercase "
            f"letters, digits and '-'), as the API server requires; got {quote(namespace)}"
        )
    return problems


def load_document(doc: Any, source: str, base_dir: Path, index: int = 0) -> LoadedJob:
    """Validate one parsed document; never raises for bad content, returns the problems."""
    default_name = Path(source).stem if index == 0 else f"{Path(source).stem}-{index}"
    if not isinstance(doc, dict):
        return LoadedJob(
            default_name,
            source,
            base_dir,
            False,
            problems=[
                f"<root>: expected a mapping (an RLHFJob or a job config), got {type(doc).__name__}"
            ],
        )
    if "kind" in doc or "apiVersion" in doc:
        return _load_manifest(doc, source, base_dir, default_name)
    unstorable = document_problems(doc)
    if unstorable:
        return LoadedJob(default_name, source, base_dir, False, problems=unstorable)
    try:
        config = JobConfig.model_validate(doc)
    except ValidationError as err:
        return LoadedJob(default_name, source, base_dir, False, problems=validation_messages(err))
    return LoadedJob(default_name, source, base_dir, False, config=config)


_ROOT_KEYS = {"apiVersion", "kind", "metadata", "spec", "status"}


def _load_manifest(doc: dict[str, Any], source: str, base_dir: Path, name: str) -> LoadedJob:
    """An RLHFJob or an RLHFPipeline manifest: every problem of its header and spec at once."""
    problems: list[str] = [
        f"{key if len(str(key)) <= 64 else quote(str(key), 64)}: unknown field (an RLHFJob "
        "has apiVersion, kind, metadata, spec and status; kubectl refuses others)"
        for key in doc
        if key not in _ROOT_KEYS
    ]
    if doc.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: must be {API_VERSION} (got {quote(doc.get('apiVersion'))})")
    pipeline = doc.get("kind") == PIPELINE_KIND
    if doc.get("kind") != KIND and not pipeline:
        problems.append(f"kind: must be {KIND} or {PIPELINE_KIND} (got {quote(doc.get('kind'))})")
    bad_name = _name_problems(doc.get("metadata"))
    problems += bad_name
    metadata = doc.get("metadata")
    if isinstance(metadata, dict) and not bad_name:
        name = str(metadata["name"])
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    ns = str(namespace) if namespace else None
    spec_doc = doc.get("spec")
    if not isinstance(spec_doc, dict):
        problems.append("spec: required field is missing")
        return LoadedJob(name, source, base_dir, True, problems=problems, namespace=ns)
    unstorable = document_problems(spec_doc, "spec")
    if unstorable:
        return LoadedJob(name, source, base_dir, True, problems=problems + unstorable)
    try:
        if pipeline:
            stages = validate_pipeline_spec(spec_doc)
            problems += [p.render("spec") for p in name_problems(name, stages)]
            return LoadedJob(
                name, source, base_dir, True, problems=problems, pipeline=stages, namespace=ns
            )
        spec = JobSpec.model_validate(spec_doc)
    except ValidationError as err:
        problems += validation_messages(err, prefix="spec")
        return LoadedJob(name, source, base_dir, True, problems=problems, namespace=ns)
    if problems:
        return LoadedJob(name, source, base_dir, True, problems=problems, namespace=ns)
    return LoadedJob(
        name, source, base_dir, True, spec=spec, config=spec.job_config(), namespace=ns
    )


def load_file(path: str | Path) -> list[LoadedJob]:
    """Every document of a YAML (or JSON, which is YAML) file; empty documents are skipped.
    Never raises for what the file holds: a file that cannot be read within the bounds of
    `documents` is one problem naming the file."""
    path = Path(path)
    try:
        docs = read_documents(path)
    except DocumentError as err:
        return [LoadedJob(path.stem, str(path), path.parent, False, problems=[f"{path}: {err}"])]
    if not docs:
        return [
            LoadedJob(path.stem, str(path), path.parent, False, problems=[f"{path}: no documents"])
        ]
    return [load_document(d, str(path), path.parent.resolve(), i) for i, d in enumerate(docs)]
