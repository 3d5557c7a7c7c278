"""`spec.checkpoint`: when checkpoints are written, how many are kept, how runs resume."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from .base import ConfigModel
from .names import DNS_SUBDOMAIN, PATH_MAX, QUANTITY_MAX_LENGTH, STORAGE_QUANTITY

# `checkpoint.resumeFrom: latest`: the newest checkpoint of the directory, whoever wrote it.
RESUME_LATEST = "latest"
# The RLHFJob's UID, which the operator gives the trainer and every checkpoint records: a job
# created again under the same name (same storage) has another one.
JOB_UID_ENV = "RLHF_JOB_UID"


class ResumePolicy(StrEnum):
    # Continue from the newest complete checkpoint when there is one, else start fresh.
    AUTO = "auto"
    NEVER = "never"


class AccessMode(StrEnum):
    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_WRITE_MANY = "ReadWriteMany"


class CheckpointStorage(ConfigModel):
    """The job's storage volume on a cluster: checkpoints, and the outputs that must outlive
    the pods (final model, metrics, TensorBoard logs). An existing claim, or a new PVC of
    `size`; without this section the operator creates one of its default size."""

    claim_name: str | None = Field(None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    size: str | None = Field(None, max_length=QUANTITY_MAX_LENGTH, pattern=STORAGE_QUANTITY)
    storage_class_name: str | None = Field(
        None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN
    )
    access_mode: AccessMode | None = Field(
        None,
        description="Of a new PVC. Default ReadWriteMany: the head and every worker pod mount "
        "it, on any node. ReadWriteOnce only for jobs with a single worker pod (the operator "
        "then keeps the head on the worker's node).",
    )
    retain_on_delete: bool = Field(
        True, description="Keep a created PVC when the RLHFJob is deleted."
    )

    @model_validator(mode="after")
    def _claim_or_size(self) -> Self:
        if (self.claim_name is None) == (self.size is None):
            raise ValueError("set exactly one of claimName (existing PVC) or size (new PVC)")
        return self


class BestMode(StrEnum):
    MAX = "max"
    MIN = "min"


class KeepBest(ConfigModel):
    """`checkpoint.keepBest`: keep the checkpoint whose step scored best on `metric` besides
    the newest `keep` ones (it is never rotated away) and export it as `best/` beside
    `final/`. Every evaluation step is then a checkpoint step too, so each score has its
    checkpoint."""

    metric: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9_./@-]+$",
        description="A metric the steps report, e.g. eval/pass@1 or eval/mean_reward "
        "(metrics.jsonl names).",
    )
    mode: BestMode = Field(BestMode.MAX, description="max: higher is better; min: lower.")


class CheckpointConfig(ConfigModel):
    every_steps: int | None = Field(
        None, gt=0, description="Save every N steps (always at the end)."
    )
    keep: int = Field(3, ge=1, le=1000, description="Checkpoints kept; older ones are removed.")
    keep_best: KeepBest | None = Field(
        None,
        description="Also keep (and export as best/) the checkpoint that scored best on a "
        "metric, e.g. {metric: eval/pass@1, mode: max}; unset: only the newest `keep`.",
    )
    resume: ResumePolicy = ResumePolicy.AUTO
    resume_from: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="Resume from this checkpoint even if another job wrote it: `latest` (the "
        "newest in this job's checkpoint directory) or the path of a step-N directory "
        "(relative: to the checkpoint directory). Without it a job resumes only its own "
        "checkpoints (same job UID).",
    )
    export_hf: bool = Field(True, description="Export the final actor (and critic) in HF format.")
    dir: str | None = Field(
        None,
        max_length=PATH_MAX,
        description="Where checkpoints go. Default: <run dir>/checkpoints (local).",
    )
    storage: CheckpointStorage | None = Field(
        None,
        description="Cluster only: the PVC for checkpoints and outputs (default: a new PVC of "
        "the operator's default size).",
    )
