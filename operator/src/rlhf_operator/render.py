"""`rlhf-operator render FILE`: every child object of each RLHFJob in a file, as YAML; for an
RLHFPipeline, each stage's RLHFJob followed by that job's children.

A dry run for GitOps review and debugging: the same validation, placement plan and builders
the operator runs, with no cluster. Objects the API server would fill in (the owner's uid) get
a visible placeholder. A `fromJob` model source is rendered as the operator would pass it:
the named job's `status.output.model` when that job is in the same file (where it will write
its model is known from its spec), else a placeholder location, with a note saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlhf_trainer.config import JobSpec, LoadedJob, cluster_problems, load_file
from rlhf_trainer.config.pipeline import topological_order
from rlhf_trainer.config.sources import job_references

from .api.v1alpha1 import JobInput, RLHFJob
from .builders.allocation import PlacementError
from .builders.children import render_children
from .builders.common import BuildError
from .builders.volumes import job_output
from .reconcile.inputs import with_inputs
from .reconcile.pipelines import STAGE_LABEL, stage_job
from .reconcile.platform_policy import policy_problems
from .settings import OperatorSettings

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
PLACEHOLDER_CLAIM = "from-job-placeholder"


@dataclass(frozen=True)
class Rendered:
    source: str
    name: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # With spec.placement.auto: what status.allocation.reasons will say.
    reasons: dict[str, str] = field(default_factory=dict)


def render_file(
    path: str | Path, settings: OperatorSettings, *, namespace: str | None = None
) -> list[Rendered]:
    """Each document's children; `namespace` overrides the manifests' metadata.namespace
    (default: theirs, else "default")."""
    out: list[Rendered] = []
    loaded_jobs = load_file(path)
    in_file = {j.name: j.spec for j in loaded_jobs if j.ok and j.spec is not None}
    for loaded in loaded_jobs:
        doc_namespace = loaded.namespace
        if loaded.ok and loaded.pipeline is not None:
            out.append(_render_pipeline(loaded, settings, namespace or doc_namespace or "default"))
            continue
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
        inputs, notes = _render_inputs(job, in_file)
        try:
            children = render_children(with_inputs(job, inputs), settings)
        except (PlacementError, BuildError) as err:
            out.append(Rendered(loaded.source, loaded.name, problems=[str(err)]))
            continue
        reasons = dict(children.allocation.reasons)
        out.append(
            Rendered(loaded.source, loaded.name, objects=children.all, notes=notes, reasons=reasons)
        )
    return out


def _render_pipeline(loaded: LoadedJob, settings: OperatorSettings, namespace: str) -> Rendered:
    """The stage RLHFJobs the pipeline creates (each owned by it), each followed by its own
    children; `fromStage` is `fromJob` of the stage job, resolved as the operator will once
    that stage succeeded (its output location follows from its spec)."""
    spec = loaded.pipeline
    if spec is None:  # the caller checked
        raise ValueError("not a pipeline")
    body = {"metadata": {"name": loaded.name, "namespace": namespace, "uid": PLACEHOLDER_UID}}
    stage_jobs = [stage_job(body, spec, name) for name in topological_order(spec)]
    in_file = {j["metadata"]["name"]: JobSpec.model_validate(j["spec"]) for j in stage_jobs}
    objects: list[dict[str, Any]] = []
    problems: list[str] = []
    notes: list[str] = []
    for obj in stage_jobs:
        job = RLHFJob.model_validate(
            {**obj, "metadata": {**obj["metadata"], "uid": PLACEHOLDER_UID}}
        )
        index = [s.name for s in spec.stages].index(obj["metadata"]["labels"][STAGE_LABEL])
        prefix = f"spec.stages[{index}].spec"
        cluster = [p.render(prefix) for p in cluster_problems(job.spec)]
        cluster += policy_problems(job.spec, settings)
        if cluster:
            problems += cluster
            continue
        inputs, stage_notes = _render_inputs(job, in_file)
        notes += stage_notes
        try:
            objects += [obj, *render_children(with_inputs(job, inputs), settings).all]
        except (PlacementError, BuildError) as err:
            problems.append(f"{prefix}: {err}")
    if problems:
        return Rendered(loaded.source, loaded.name, problems=problems)
    return Rendered(loaded.source, loaded.name, objects=objects, notes=notes)


def _render_inputs(
    job: RLHFJob, in_file: dict[str, JobSpec]
) -> tuple[tuple[JobInput, ...], list[str]]:
    """What each `fromJob` would resolve to (see the module's doc), and the notes to print."""
    inputs: list[JobInput] = []
    notes: list[str] = []
    for role, name in job_references(job.spec).items():
        producer = in_file.get(name)
        if producer is not None:
            other = RLHFJob(metadata={"name": name, "namespace": job.namespace}, spec=producer)
            model = job_output(other).model
        else:
            model = None
        if model is None:
            model = f"pvc://{PLACEHOLDER_CLAIM}/{name}"
            notes.append(
                f"spec.models.{role}.fromJob: RLHFJob {name} is not in this file (or exports "
                f"no model): rendered with the placeholder {model}; the operator passes "
                f"{name}'s status.output.model once it succeeded"
            )
        inputs.append(JobInput(role=role, from_job=name, uid=PLACEHOLDER_UID, model=model))
    return tuple(inputs), notes


class _ReviewDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Multi-line strings (the ConfigMap's job.yaml) as literal blocks, readable in review.
    libyaml's dumper where PyYAML has it: large specs render in a fraction of the time."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ReviewDumper.add_representer(str, _str_representer)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_ReviewDumper, sort_keys=False, default_flow_style=False)


def reasons_comment(rendered: Rendered) -> str:
    """`placement.auto`'s choice as YAML comments above the job's objects (empty without)."""
    if not rendered.reasons:
        return ""
    lines = [f"# {rendered.name}: placement.auto chose (status.allocation.reasons):"]
    lines += [f"#   {key}: {why}" for key, why in rendered.reasons.items()]
    return "\n".join(lines) + "\n"
