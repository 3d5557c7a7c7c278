"""The job config (what the trainer reads) and the full RLHFJob spec (what a manifest holds)."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, StringConstraints, ValidationInfo, model_validator

from .algorithm import AlgorithmConfig
from .base import ConfigModel, raise_problems
from .checkpoint import CheckpointConfig, ResumePolicy
from .cluster import ENV_MAX_ITEMS, EnvVar, NetworkConfig, PullPolicy, RunPolicy, SecretRefs
from .data import DataConfig
from .env_rules import env_problems
from .logging import LoggingConfig
from .models import ModelsConfig
from .names import DNS_SUBDOMAIN, IMAGE
from .output import ObjectStoreConfig, OutputConfig
from .placement import PlacementConfig
from .rollout import RolloutConfig
from .rules import job_problems
from .sizes import size_problems
from .sources import IN_PIPELINE, stage_outside_pipeline_problems
from .training import TrainingConfig


class JobConfig(ConfigModel):
    """Everything the trainer needs; `rlhf run` reads it, the operator writes it to a
    ConfigMap. Kubernetes-only keys of `placement` and `checkpoint` are ignored by the
    trainer, and so are those of `runPolicy` but `guardrails`."""

    algorithm: AlgorithmConfig
    models: ModelsConfig
    data: DataConfig
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    # The trainer reads only `guardrails` of it; the rest is the operator's (retries, deadline).
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    object_store: ObjectStoreConfig | None = Field(
        None, description="The S3-compatible store of the job's s3:// inputs and output."
    )

    @model_validator(mode="after")
    def _cross_field_rules(self, info: ValidationInfo) -> Self:
        problems = job_problems(self)
        if not (info.context or {}).get(IN_PIPELINE):
            problems += stage_outside_pipeline_problems(self)
        raise_problems(problems)
        return self

    def with_overrides(self, *, resume: str | None, max_steps: int | None) -> JobConfig:
        """This job with `rlhf run --resume/--max-steps` applied (validated again)."""
        doc = self.to_document()
        if resume is not None:
            doc["checkpoint"]["resume"] = ResumePolicy(resume)
            if resume == ResumePolicy.NEVER:  # "start fresh" outranks a named checkpoint
                doc["checkpoint"].pop("resumeFrom", None)
        if max_steps is not None:
            doc["training"]["maxSteps"] = max_steps
        return JobConfig.model_validate(doc)


class JobSpec(JobConfig):
    """`spec` of an RLHFJob: the job config plus how it runs on Kubernetes."""

    image: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        pattern=IMAGE,
        description="Trainer image; default: the operator's setting.",
    )
    image_pull_policy: PullPolicy = PullPolicy.IF_NOT_PRESENT
    image_pull_secrets: list[
        Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
    ] = Field(default_factory=list, max_length=16)
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=ENV_MAX_ITEMS,
        description="Variables of every container of the job. Not: the operator's own, RLHF_* "
        "(but RLHF_TRACEBACK, RLHF_VERBOSE, RLHF_WEIGHT_SYNC, RLHF_THREADS_PER_RANK), where "
        "Ray or the API server is (RAY_ADDRESS, KUBERNETES_*), the loader's, Python's or a "
        "shell's hooks (LD_*, PYTHONPATH, PATH, BASH_ENV...); credentials (*_TOKEN, "
        "*_PASSWORD, *_API_KEY...) by valueFrom.secretKeyRef only; each name once.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    secrets: SecretRefs = Field(default_factory=SecretRefs)
    network: NetworkConfig = Field(default_factory=NetworkConfig)

    @model_validator(mode="after")
    def _env_rules(self) -> Self:
        raise_problems(env_problems(self) + size_problems(self))
        return self

    def job_config(self) -> JobConfig:
        """The trainer's part, as the operator writes it into the job ConfigMap."""
        keys = set(JobConfig.model_fields)
        return JobConfig(**{k: getattr(self, k) for k in keys})
