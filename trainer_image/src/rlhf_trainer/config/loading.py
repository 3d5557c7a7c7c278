"""Read job files: bare job configs or full RLHFJob manifests, YAML or JSON, many documents."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .errors import validation_messages
from .job import JobConfig, JobSpec
from .pipeline import PIPELINE_KIND, PipelineSpec, name_problems, validate_pipeline_spec

API_GROUP = "rlhf.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "RLHFJob"
# Children are named "<job>-<suffix>" and KubeRay derives pod and service names from the
# RayJob's name, so job names must be DNS-1035 labels with room to spare.
NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX_LENGTH = 40


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
    name = str(metadata["name"])
    if len(name) > NAME_MAX_LENGTH or not NAME_PATTERN.match(name):
        return [
            f"metadata.name: must be a DNS-1035 label of at most {NAME_MAX_LENGTH} characters "
            f"(lowercase letters, digits and '-', starting with a letter); got {name!r}"
        ]
    return []


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
    try:
        config = JobConfig.model_validate(doc)
    except ValidationError as err:
        return LoadedJob(default_name, source, base_dir, False, problems=validation_messages(err))
    return LoadedJob(default_name, source, base_dir, False, config=config)


def _load_manifest(doc: dict[str, Any], source: str, base_dir: Path, name: str) -> LoadedJob:
    """An RLHFJob or an RLHFPipeline manifest: every problem of its header and spec at once."""
    problems: list[str] = []
    if doc.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: must be {API_VERSION} (got {doc.get('apiVersion')!r})")
    pipeline = doc.get("kind") == PIPELINE_KIND
    if doc.get("kind") != KIND and not pipeline:
        problems.append(f"kind: must be {KIND} or {PIPELINE_KIND} (got {doc.get('kind')!r})")
    problems += _name_problems(doc.get("metadata"))
    metadata = doc.get("metadata")
    if isinstance(metadata, dict) and metadata.get("name"):
        name = str(metadata["name"])
    spec_doc = doc.get("spec")
    if not isinstance(spec_doc, dict):
        problems.append("spec: required field is missing")
        return LoadedJob(name, source, base_dir, True, problems=problems)
    try:
        if pipeline:
            stages = validate_pipeline_spec(spec_doc)
            problems += [p.render("spec") for p in name_problems(name, stages)]
            return LoadedJob(name, source, base_dir, True, problems=problems, pipeline=stages)
        spec = JobSpec.model_validate(spec_doc)
    except ValidationError as err:
        problems += validation_messages(err, prefix="spec")
        return LoadedJob(name, source, base_dir, True, problems=problems)
    if problems:
        return LoadedJob(name, source, base_dir, True, problems=problems)
    return LoadedJob(name, source, base_dir, True, spec=spec, config=spec.job_config())


def load_file(path: str | Path) -> list[LoadedJob]:
    """Every document of a YAML (or JSON, which is YAML) file; empty documents are skipped."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        return [
            LoadedJob(
                path.stem,
                str(path),
                path.parent,
                False,
                problems=[f"{path}: cannot read: {err.strerror}"],
            )
        ]
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        return [
            LoadedJob(
                path.stem,
                str(path),
                path.parent,
                False,
                problems=[f"{path}: not valid YAML/JSON: {err}"],
            )
        ]
    if not docs:
        return [
            LoadedJob(path.stem, str(path), path.parent, False, problems=[f"{path}: no documents"])
        ]
    return [load_document(d, str(path), path.parent.resolve(), i) for i, d in enumerate(docs)]
