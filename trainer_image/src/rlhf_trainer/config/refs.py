"""References to keys of Kubernetes Secrets and ConfigMaps: how a spec names credentials and
files without holding them."""

from __future__ import annotations

from pydantic import Field

from .base import ConfigModel
from .names import DATA_KEY, DNS_SUBDOMAIN


class SecretKeyRef(ConfigModel):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    key: str = Field(min_length=1, max_length=253, pattern=DATA_KEY)


class ConfigMapKeyRef(ConfigModel):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    key: str = Field(min_length=1, max_length=253, pattern=DATA_KEY)
