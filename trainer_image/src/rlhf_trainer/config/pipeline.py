"""`spec` of an RLHFPipeline: named stages, each an RLHFJob spec whose model sources may name an
earlier stage's final model (`fromStage`). The stages form a DAG: a stage runs once the stages
it names have succeeded, and stages that do not depend on each other run in parallel (e.g. SFT
and a reward model from the same base, then PPO from both).

On a cluster each stage is the RLHFJob `<pipeline>-<stage>` (`fromStage: x` rendered as
`fromJob: <pipeline>-x`); `rlhf run PIPELINE.yaml` runs the stages one after another in
topological order, `fromStage` pointing at the earlier stage's local export. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import Field, model_validator

from .base import ConfigModel, Problem, raise_problems
from .job import JobConfig, JobSpec
from .sizes import object_problems
from .sources import IN_PIPELINE, replace_sources, stage_references, with_pretrained

PIPELINE_KIND = "RLHFPipeline"
# The name of the RLHFJob a stage runs as: `<pipeline>-<stage>`, at most 40 characters.
STAGE_JOB_MAX_LENGTH = 40
_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class PipelineStage(ConfigModel):
    name: str = Field(
        min_length=1,
        max_length=32,
        pattern=_NAME,
        description="Unique in the pipeline; its RLHFJob is named <pipeline>-<name>.",
    )
    spec: JobSpec = Field(
        description="The stage's RLHFJob spec; a model source may be fromStage: <stage>."
    )


class PipelineSpec(ConfigModel):
    """`spec` of an RLHFPipeline. Validate it with `validate_pipeline_spec` (the stages may
    use `fromStage`, which a plain RLHFJob spec may not)."""

    stages: list[PipelineStage] = Field(min_length=1, max_length=32)
    suspend: bool = Field(
        False, description="Suspend every running stage and start no new one; false resumes."
    )

    @model_validator(mode="after")
    def _dag(self) -> Self:
        raise_problems(dag_problems(self) + object_problems(self.to_manifest(), "RLHFPipeline"))
        return self

    def stage(self, name: str) -> PipelineStage:
        return next(s for s in self.stages if s.name == name)


def validate_pipeline_spec(doc: Any) -> PipelineSpec:
    """`PipelineSpec.model_validate` with `fromStage` allowed in its stages."""
    return PipelineSpec.model_validate(doc, context={IN_PIPELINE: True})


def stage_inputs(stage: PipelineStage) -> set[str]:
    """The stages whose model this stage takes."""
    return set(stage_references(stage.spec).values())


def dag_problems(spec: PipelineSpec) -> list[Problem]:
    """Duplicate names, `fromStage` naming no stage or the stage itself, and cycles."""
    out: list[Problem] = []
    names = [s.name for s in spec.stages]
    for i, name in enumerate(names):
        if name in names[:i]:
            out.append(Problem(f"stages[{i}].name", f"duplicate stage name {name!r}"))
    for i, stage in enumerate(spec.stages):
        for role, other in stage_references(stage.spec).items():
            field = f"stages[{i}].spec.models.{role}.fromStage"
            if other == stage.name:
                out.append(Problem(field, f"a stage cannot take its own model ({other!r})"))
            elif other not in names:
                known = ", ".join(names)
                out.append(Problem(field, f"no stage named {other!r} (stages: {known})"))
    if not out:
        cycle = _cycle(spec)
        if cycle:
            i = names.index(cycle[0])
            out.append(
                Problem(
                    f"stages[{i}]",
                    "the stages' fromStage references form a cycle: " + " -> ".join(cycle),
                )
            )
    return out


def _cycle(spec: PipelineSpec) -> list[str]:
    """One cycle of stage names (first repeated at the end), or [] for a DAG."""
    edges = {s.name: sorted(stage_inputs(s)) for s in spec.stages}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str]:
        state[name] = 1
        path.append(name)
        for other in edges[name]:
            if state.get(other) == 1:
                return [*path[path.index(other) :], other]
            if other not in state:
                found = visit(other)
                if found:
                    return found
        path.pop()
        state[name] = 2
        return []

    for stage in spec.stages:
        if stage.name not in state:
            found = visit(stage.name)
            if found:
                return found
    return []


def topological_order(spec: PipelineSpec) -> list[str]:
    """Stage names, each after every stage it takes a model from (ties: in spec order)."""
    done: list[str] = []
    remaining = [s.name for s in spec.stages]
    while remaining:
        ready = next(n for n in remaining if stage_inputs(spec.stage(n)) <= set(done))
        done.append(ready)
        remaining.remove(ready)
    return done


def stage_job_name(pipeline: str, stage: str) -> str:
    return f"{pipeline}-{stage}"


def name_problems(pipeline: str, spec: PipelineSpec) -> list[Problem]:
    """Stage job names (`<pipeline>-<stage>`) must fit an RLHFJob's name."""
    return [
        Problem(
            f"stages[{i}].name",
            f"the stage's RLHFJob {stage_job_name(pipeline, s.name)!r} would be longer than "
            f"{STAGE_JOB_MAX_LENGTH} characters: shorten the pipeline's or the stage's name",
        )
        for i, s in enumerate(spec.stages)
        if len(stage_job_name(pipeline, s.name)) > STAGE_JOB_MAX_LENGTH
    ]


def stage_job_spec(pipeline: str, stage: PipelineStage) -> dict[str, Any]:
    """The RLHFJob spec (a manifest dict) the stage runs as on a cluster: `fromStage: x`
    becomes `fromJob: <pipeline>-x`, which the operator resolves and records."""
    refs = stage_references(stage.spec)
    sources = {role: {"fromJob": stage_job_name(pipeline, other)} for role, other in refs.items()}
    doc = replace_sources(stage.spec.to_manifest(), sources)
    JobSpec.model_validate(doc)  # what the stage's RLHFJob will be validated as
    return doc


def local_stage_config(stage: PipelineStage, exports: Mapping[str, str]) -> JobConfig:
    """The job config `rlhf run` runs for a stage: `fromStage: x` -> `pretrained: <x's
    export directory>` (`exports`: stage -> its final model on this machine)."""
    refs = stage_references(stage.spec)
    return with_pretrained(stage.spec, {r: exports[s] for r, s in refs.items()}).job_config()
