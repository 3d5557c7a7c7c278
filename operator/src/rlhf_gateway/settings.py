"""The gateway's configuration: one YAML file (the chart renders it from `gateway.*` values).

`RLHF_GATEWAY_CONFIG` (or `rlhf-gateway --config`) names the file. Everything the platform
decides lives here: the base-model catalog, where files go, which RL algorithm
`reinforcement` runs, how users map to namespaces. The gateway keeps no other state.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Self

import yaml
from pydantic import Field, ValidationError, model_validator

from rlhf_trainer.config import AlgorithmName, ConfigModel, ModelSource, validation_messages
from rlhf_trainer.config.output import ObjectStoreConfig

CONFIG_ENV = "RLHF_GATEWAY_CONFIG"
_S3 = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/(?P<prefix>.*))?$")
_PVC = re.compile(r"^pvc://(?P<claim>[a-z0-9]([-a-z0-9]*[a-z0-9])?)(/(?P<path>.*))?$")


class CatalogModel(ConfigModel):
    """A base model tenants may fine-tune: its id in `GET /v1/models`, where its weights come
    from (a model source as `spec.models.actor` takes it) and the spec defaults its jobs get
    (placement such as `{auto: true, totalGpus: 8}`, rollout, training, image...)."""

    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    source: ModelSource
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description="RLHFJob spec defaults (camelCase) merged under what a request sets.",
    )
    owned_by: str = "platform"
    created: int = Field(0, ge=0, description="Unix seconds shown as the model's `created`.")


class ScoreModel(ConfigModel):
    """A reward model the platform serves to `score_model` graders: the id a grader's `model`
    names, and where its weights come from (a sequence-scoring reward model, as
    `spec.models.rewardModels` takes it, sharing the tokenizer of the catalog's models). A
    job whose grader names it gets it as its reward model (`scoreRange` = the grader's range)."""

    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    source: ModelSource
    description: str | None = Field(None, max_length=512)


class FilesConfig(ConfigModel):
    """Where uploaded files live: `s3://bucket/prefix` (with the object store settings jobs
    get as `spec.objectStore`) or `pvc://claim/path`, a ReadWriteMany volume the gateway
    mounts at `mountPath` and every tenant namespace has a claim of the same name for."""

    uri: str = Field(min_length=6)
    mount_path: str | None = Field(None, description="pvc:// only: where the gateway mounts it.")
    object_store: ObjectStoreConfig | None = None
    max_bytes: int = Field(
        512 * 1024 * 1024, gt=0, description="Largest upload accepted (413 above)."
    )

    @model_validator(mode="after")
    def _scheme(self) -> Self:
        if _S3.match(self.uri) is None and _PVC.match(self.uri) is None:
            raise ValueError("uri: must be s3://<bucket>[/<prefix>] or pvc://<claim>[/<path>]")
        if self.uri.startswith("pvc://") and not self.mount_path:
            raise ValueError("mountPath: required for a pvc:// uri (where the gateway mounts it)")
        return self

    @property
    def is_s3(self) -> bool:
        return self.uri.startswith("s3://")

    def s3_bucket_prefix(self) -> tuple[str, str]:
        match = _S3.match(self.uri)
        if match is None:
            raise ValueError(f"not an s3:// uri: {self.uri}")
        return match["bucket"], (match["prefix"] or "").strip("/")

    def pvc_claim_path(self) -> tuple[str, str]:
        match = _PVC.match(self.uri)
        if match is None:
            raise ValueError(f"not a pvc:// uri: {self.uri}")
        return match["claim"], (match["path"] or "").strip("/")


class GatewaySettings(ConfigModel):
    catalog: list[CatalogModel] = Field(default_factory=list)
    files: FilesConfig
    reinforcement_algorithm: AlgorithmName = Field(
        AlgorithmName.GRPO, description="What `method: reinforcement` runs."
    )
    namespaces: dict[str, str] = Field(
        default_factory=dict,
        description="User name -> namespace, for identities that are not ServiceAccounts "
        "(a ServiceAccount's namespace is its tenant's).",
    )
    max_jobs_listed: int = Field(100, gt=0, le=1000, description="Upper bound of `limit`.")
    score_models: list[ScoreModel] = Field(
        default_factory=list,
        description="Reward models that score_model graders may name (none: such graders "
        "are refused, naming grader.model).",
    )

    @model_validator(mode="after")
    def _unique_ids(self) -> Self:
        for where, entries in (("catalog", self.catalog), ("scoreModels", self.score_models)):
            ids = [m.id for m in entries]
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            if dupes:
                raise ValueError(
                    f"{where}: model ids must be unique (repeated: {', '.join(dupes)})"
                )
        return self

    def catalog_model(self, model_id: str) -> CatalogModel | None:
        return next((m for m in self.catalog if m.id == model_id), None)

    def score_model(self, model_id: str) -> ScoreModel | None:
        return next((m for m in self.score_models if m.id == model_id), None)


class SettingsError(ValueError):
    """The configuration file is missing or invalid: one line per problem."""


def load_settings(path: str | os.PathLike[str] | None = None) -> GatewaySettings:
    where = path or os.environ.get(CONFIG_ENV)
    if not where:
        raise SettingsError(f"no configuration: pass --config FILE or set {CONFIG_ENV}")
    try:
        doc = yaml.safe_load(Path(where).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise SettingsError(f"{where}: cannot read: {err}") from None
    try:
        return GatewaySettings.model_validate(doc)
    except ValidationError as err:
        raise SettingsError("\n".join(f"{where}: {m}" for m in validation_messages(err))) from None
