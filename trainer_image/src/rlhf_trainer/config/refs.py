"""References to keys of Kubernetes Secrets and ConfigMaps: how a spec names credentials and
files without holding them."""

from __future__ import annotations

from pydantic import Field

from .base import ConfigModel


class SecretKeyRef(ConfigModel):
    name: str = Field(min_length=1, max_length=253)
    key: str = Field(min_length=1, max_length=253)


class ConfigMapKeyRef(ConfigModel):
    name: str = Field(min_length=1, max_length=253)
    key: str = Field(min_length=1, max_length=253)
