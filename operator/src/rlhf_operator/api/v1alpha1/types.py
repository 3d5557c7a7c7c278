"""The RLHFJob resource: names of the API and the top-level model."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from rlhf_trainer.config import API_GROUP, JobSpec
from rlhf_trainer.config import KIND as CONFIG_KIND
from rlhf_trainer.config.base import ManifestModel

from .status import RLHFJobStatus

GROUP = API_GROUP
VERSION = "v1alpha1"
KIND = CONFIG_KIND
LIST_KIND = f"{KIND}List"
PLURAL = "rlhfjobs"
SINGULAR = "rlhfjob"
SHORT_NAMES = ["rlhf"]
# `kubectl get rlhf-all` lists jobs and pipelines together. No category may equal a short
# name: kubectl expands a category first, so `rlhf` as both made `kubectl get rlhf -w` and
# `kubectl describe rlhf NAME` refuse to run (several resource types).
CATEGORIES = ["rlhf-all", "ml"]


class Resource(ManifestModel):
    """One of our resources as the API server returns it. `metadata` stays a plain dict: it is
    Kubernetes' ObjectMeta, validated by the server, not by us."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: str = Field(f"{GROUP}/{VERSION}", alias="apiVersion")
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", "default"))


class RLHFJob(Resource):
    kind: str = KIND
    spec: JobSpec
    status: RLHFJobStatus | None = None
