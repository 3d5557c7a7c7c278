"""`spec.checkpoint`: when checkpoints are written, how many are kept, how runs resume."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from .base import ConfigModel


class ResumePolicy(StrEnum):
    # Continue from the newest complete checkpoint when there is one, else start fresh.
    AUTO = "auto"
    NEVER = "never"


class CheckpointStorage(ConfigModel):
    """Cluster storage for checkpoints: an existing claim, or a new PVC of `size`."""

    claim_name: str | None = Field(None, min_length=1, max_length=253)
    size: str | None = Field(None, pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
    storage_class_name: str | None = Field(None, min_length=1)
    access_mode: str = Field("ReadWriteOnce", pattern=r"^(ReadWriteOnce|ReadWriteMany)$")
    retain_on_delete: bool = Field(
        True, description="Keep a created PVC when the RLHFJob is deleted."
    )

    @model_validator(mode="after")
    def _claim_or_size(self) -> Self:
        if (self.claim_name is None) == (self.size is None):
            raise ValueError("set exactly one of claimName (existing PVC) or size (new PVC)")
        return self


class CheckpointConfig(ConfigModel):
    every_steps: int | None = Field(
        None, gt=0, description="Save every N steps (always at the end)."
    )
    keep: int = Field(3, ge=1, le=1000, description="Checkpoints kept; older ones are removed.")
    resume: ResumePolicy = ResumePolicy.AUTO
    export_hf: bool = Field(True, description="Export the final actor (and critic) in HF format.")
    dir: str | None = Field(
        None, description="Where checkpoints go. Default: <run dir>/checkpoints (local)."
    )
    storage: CheckpointStorage | None = Field(
        None, description="Cluster only: the PVC that holds checkpoints."
    )
