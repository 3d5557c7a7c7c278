"""`spec.logging`: metrics sinks, and the size bound of the logs kept on the job's volume.
Secrets are only ever referenced, never inlined."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from .base import ConfigModel
from .names import NAME_MAX
from .podlogs import ContainerLogsConfig


class WandbMode(StrEnum):
    ONLINE = "online"
    OFFLINE = "offline"


class WandbConfig(ConfigModel):
    project: str = Field(min_length=1, max_length=NAME_MAX)
    entity: str | None = Field(None, max_length=NAME_MAX)
    run_name: str | None = Field(None, max_length=NAME_MAX)
    # The API key comes from the environment (WANDB_API_KEY), which on a cluster the operator
    # fills from spec.secrets.wandbApiKey: keys are never written in a manifest.
    mode: WandbMode = WandbMode.ONLINE


class LoggingConfig(ConfigModel):
    log_every_steps: int = Field(1, gt=0)
    tensorboard: bool = True
    wandb: WandbConfig | None = None
    # On a cluster: each container's log on the job's volume, rotated (config/podlogs.py).
    container_logs: ContainerLogsConfig = Field(default_factory=ContainerLogsConfig)
