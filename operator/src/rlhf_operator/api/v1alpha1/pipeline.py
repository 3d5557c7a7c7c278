"""The RLHFPipeline resource (group rlhf.dev): stages of RLHFJobs (the spec is
`rlhf_trainer.config.pipeline.PipelineSpec`) and the status the operator computes."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from rlhf_trainer.config import ConfigModel
from rlhf_trainer.config.pipeline import PIPELINE_KIND, PipelineSpec

from .status import Condition, Phase
from .types import Resource

PIPELINE_PLURAL = "rlhfpipelines"
PIPELINE_SINGULAR = "rlhfpipeline"
PIPELINE_SHORT_NAMES = ["rlhfp"]
PIPELINE_LIST_KIND = f"{PIPELINE_KIND}List"


class StageState(StrEnum):
    """Where a stage is; once its RLHFJob exists, `phase` says how that job is doing."""

    # Its inputs (earlier stages) have not all succeeded: its RLHFJob is not created yet.
    WAITING = "Waiting"
    # An earlier stage failed (or another stage did: the pipeline stopped): it will not run.
    BLOCKED = "Blocked"
    # An RLHFJob of the stage's name exists that this pipeline does not own: left alone.
    CONFLICT = "Conflict"
    # Its RLHFJob exists (created by the pipeline).
    CREATED = "Created"


class StageStatus(ConfigModel):
    name: str
    job: str = Field(description="The stage's RLHFJob: <pipeline>-<stage>.")
    state: StageState = StageState.WAITING
    phase: Phase | None = Field(None, description="The stage's RLHFJob's phase, once created.")
    output: str | None = Field(None, description="The stage's final model, once it succeeded.")
    message: str | None = None


class RLHFPipelineStatus(ConfigModel):
    phase: Phase = Field(
        Phase.PENDING, description="Pending, Running, Succeeded, Failed, Suspended."
    )
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    stages: list[StageStatus] = Field(default_factory=list)
    progress: str | None = Field(None, description="'succeeded/total' stages, for printers.")
    start_time: str | None = None
    completion_time: str | None = None
    message: str | None = None


class RLHFPipeline(Resource):
    kind: str = PIPELINE_KIND
    spec: PipelineSpec
    status: RLHFPipelineStatus | None = None
