"""One pass over an RLHFPipeline as a pure decision: (pipeline body, its stages' RLHFJobs as
observed, now) -> the status, the stage RLHFJobs to create, the suspends to set.

A stage's RLHFJob (`<pipeline>-<stage>`, owned by the pipeline, labelled with both names) is
created once every stage it takes a model from has succeeded; `fromStage` becomes `fromJob`,
which the RLHFJob's own reconcile resolves and records on its `status.inputs`. Independent
stages run at once. A failed stage (its RLHFJob Failed: after its own retries) stops the
pipeline: no further stage is created. A job of a stage's name that the pipeline does not own
(by uid) is never touched: the stage shows Conflict. Names are deterministic, so a restarted
operator finds what it made and creates each stage once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from rlhf_trainer.config import validation_messages
from rlhf_trainer.config.pipeline import (
    PipelineSpec,
    name_problems,
    stage_inputs,
    stage_job_name,
    stage_job_spec,
    topological_order,
    validate_pipeline_spec,
)

from ..api.v1alpha1 import GROUP, KIND, VERSION, ConditionReason, ConditionType, Phase
from ..api.v1alpha1.pipeline import RLHFPipelineStatus, StageState, StageStatus
from .conditions import Conditions, F, T, format_time

JSON = dict[str, Any]
PIPELINE_LABEL = f"{GROUP}/pipeline"
STAGE_LABEL = f"{GROUP}/stage"


@dataclass(frozen=True)
class StageJob:
    """An RLHFJob with a stage's name, as the watch cache has it."""

    name: str
    owned: bool  # its controller reference is this pipeline (by uid)
    phase: str | None
    output: str | None
    message: str
    suspend: bool

    @classmethod
    def from_body(cls, body: Mapping[str, Any], pipeline_uid: str) -> StageJob:
        meta = body.get("metadata") or {}
        status = body.get("status") or {}
        refs = meta.get("ownerReferences") or []
        owner = next((r for r in refs if r.get("controller")), None)
        run_policy = (body.get("spec") or {}).get("runPolicy") or {}
        return cls(
            name=str(meta.get("name", "")),
            owned=owner is not None and bool(pipeline_uid) and owner.get("uid") == pipeline_uid,
            phase=status.get("phase"),
            output=(status.get("output") or {}).get("model"),
            message=str(status.get("message") or ""),
            suspend=bool(run_policy.get("suspend", False)),
        )


@dataclass(frozen=True)
class PipelineDecision:
    status: RLHFPipelineStatus
    create: tuple[JSON, ...] = ()
    suspend: tuple[tuple[str, bool], ...] = ()  # (stage job name, runPolicy.suspend)
    invalid: str | None = None


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def _previous(body: Mapping[str, Any]) -> RLHFPipelineStatus:
    try:
        return RLHFPipelineStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return RLHFPipelineStatus()


def _generation(body: Mapping[str, Any]) -> int | None:
    value = _meta(body).get("generation")
    return int(value) if value is not None else None


def stage_job(body: Mapping[str, Any], spec: PipelineSpec, stage: str) -> JSON:
    """The RLHFJob a stage runs as, owned by the pipeline."""
    meta = _meta(body)
    pipeline = str(meta.get("name", ""))
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": stage_job_name(pipeline, stage),
            "namespace": str(meta.get("namespace", "default")),
            "labels": {PIPELINE_LABEL: pipeline, STAGE_LABEL: stage},
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "RLHFPipeline",
                    "name": pipeline,
                    "uid": str(meta.get("uid", "")),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": stage_job_spec(pipeline, spec.stage(stage)),
    }


def _invalid(body: Mapping[str, Any], problems: list[str], now: datetime) -> PipelineDecision:
    prev = _previous(body)
    message = "; ".join(problems)
    conds = Conditions(prev.conditions, now, _generation(body))
    conds.set(ConditionType.VALID, F, ConditionReason.SPEC_INVALID, message)
    status = prev.model_copy(
        update={
            "conditions": conds.as_list(),
            "observed_generation": _generation(body),
            "message": message,
            # Nothing ever ran: nothing to wait for until the spec changes.
            "phase": Phase.FAILED if not prev.stages else prev.phase,
        }
    )
    return PipelineDecision(status=status, invalid=message)


def decide_pipeline(
    body: Mapping[str, Any], jobs: Mapping[str, StageJob], now: datetime
) -> PipelineDecision:
    """`jobs`: the RLHFJobs named like this pipeline's stages, by name."""
    name = str(_meta(body).get("name", ""))
    try:
        spec = validate_pipeline_spec(body.get("spec") or {})
    except ValidationError as err:
        return _invalid(body, validation_messages(err, prefix="spec"), now)
    problems = [p.render("spec") for p in name_problems(name, spec)]
    if problems:
        return _invalid(body, problems, now)
    prev = _previous(body)
    stages: dict[str, StageStatus] = {}
    create: list[JSON] = []
    suspend: list[tuple[str, bool]] = []
    failed = any(
        (j := jobs.get(stage_job_name(name, s.name))) is not None
        and j.owned
        and j.phase == "Failed"
        for s in spec.stages
    )
    for stage_name in topological_order(spec):
        stage = spec.stage(stage_name)
        job_name = stage_job_name(name, stage_name)
        job = jobs.get(job_name)
        if job is not None and not job.owned:
            message = (
                f"an RLHFJob {job_name} exists that this pipeline does not own: delete or "
                "rename it, or rename the pipeline"
            )
            stages[stage_name] = _stage(stage_name, job_name, StageState.CONFLICT, message)
            continue
        if job is not None:
            phase = Phase(job.phase) if job.phase in set(Phase) else Phase.PENDING
            stages[stage_name] = StageStatus(
                name=stage_name,
                job=job_name,
                state=StageState.CREATED,
                phase=phase,
                output=job.output if phase is Phase.SUCCEEDED else None,
                message=job.message or None,
            )
            wanted = spec.suspend or stage.spec.run_policy.suspend
            if not phase.is_finished and job.suspend != wanted:
                suspend.append((job_name, wanted))
            continue
        inputs = sorted(stage_inputs(stage))
        blocked = [i for i in inputs if _stopped(stages[i])]
        waiting = [i for i in inputs if stages[i].phase is not Phase.SUCCEEDED]
        if blocked:
            state, message = StageState.BLOCKED, f"stage {', '.join(blocked)} failed"
        elif waiting:
            state, message = StageState.WAITING, f"waiting for stage {', '.join(waiting)}"
        elif failed:
            state, message = StageState.BLOCKED, "another stage failed: the pipeline stopped"
        elif spec.suspend:
            state, message = StageState.WAITING, "the pipeline is suspended"
        else:
            create.append(stage_job(body, spec, stage_name))
            state, message = StageState.CREATED, "RLHFJob created"
        stages[stage_name] = _stage(stage_name, job_name, state, message)
    ordered = [stages[s.name] for s in spec.stages]
    status = _status(body, prev, spec, ordered, created=bool(create), now=now)
    return PipelineDecision(status=status, create=tuple(create), suspend=tuple(suspend))


def _stage(name: str, job: str, state: StageState, message: str) -> StageStatus:
    return StageStatus(name=name, job=job, state=state, message=message)


def _stopped(stage: StageStatus) -> bool:
    return stage.state is StageState.BLOCKED or stage.phase is Phase.FAILED


def _status(
    body: Mapping[str, Any],
    prev: RLHFPipelineStatus,
    spec: PipelineSpec,
    stages: list[StageStatus],
    *,
    created: bool,
    now: datetime,
) -> RLHFPipelineStatus:
    generation = _generation(body)
    conds = Conditions(prev.conditions, now, generation)
    conds.set(ConditionType.VALID, T, ConditionReason.SPEC_VALID, "")
    succeeded = [s for s in stages if s.phase is Phase.SUCCEEDED]
    failed = [s for s in stages if s.phase is Phase.FAILED]
    conflicts = [s for s in stages if s.state is StageState.CONFLICT]
    started = created or any(s.state is StageState.CREATED for s in stages)
    message = None
    if failed:
        phase = Phase.FAILED
        message = "; ".join(f"stage {s.name} failed: {s.message or 'see ' + s.job}" for s in failed)
        conds.set(ConditionType.FAILED, T, ConditionReason.JOB_FAILED, message)
    elif len(succeeded) == len(stages):
        phase = Phase.SUCCEEDED
        message = f"{len(stages)} stages succeeded"
        conds.set(ConditionType.COMPLETE, T, ConditionReason.JOB_SUCCEEDED, message)
    elif spec.suspend:
        phase = Phase.SUSPENDED
        conds.set(ConditionType.SUSPENDED, T, ConditionReason.SUSPENDED_BY_USER, "")
    else:
        phase = Phase.RUNNING if started else Phase.PENDING
        if conds.get(ConditionType.SUSPENDED) is not None:
            conds.set(ConditionType.SUSPENDED, F, ConditionReason.RESUMED, "")
        running = [s.name for s in stages if s.state is StageState.CREATED and s not in succeeded]
        message = f"running stage {', '.join(running)}" if running else None
    if conflicts:
        message = "; ".join(f"stage {s.name}: {s.message}" for s in conflicts)
    finished = phase.is_finished
    return prev.model_copy(
        update={
            "phase": phase,
            "conditions": conds.as_list(),
            "observed_generation": generation,
            "stages": stages,
            "progress": f"{len(succeeded)}/{len(stages)}",
            "start_time": prev.start_time or (format_time(now) if started else None),
            "completion_time": prev.completion_time or (format_time(now) if finished else None),
            "message": message,
        }
    )
