"""The job config shared by the trainer and the operator. Pure pydantic: no torch import.

`JobConfig` is what the trainer runs; `JobSpec` is an RLHFJob's `spec` (job config plus
Kubernetes parts). Both validate cross-field rules and report problems by field path.
"""

from .algorithm import AlgorithmConfig, AlgorithmName, KLEstimator, LossAggregation
from .base import ConfigModel, Problem
from .checkpoint import (
    RESUME_LATEST,
    BestMode,
    CheckpointConfig,
    CheckpointStorage,
    KeepBest,
    ResumePolicy,
)
from .cluster import EgressPolicy, EnvVar, NetworkConfig, RunPolicy, SecretKeyRef, SecretRefs
from .data import DataConfig, DatasetSource
from .errors import validation_messages
from .job import JobConfig, JobSpec
from .layout import (
    DeviceGroup,
    Layout,
    LayoutError,
    PodGroup,
    describe_layout,
    plan_layout,
    role_devices,
)
from .loading import API_GROUP, API_VERSION, KIND, LoadedJob, load_document, load_file
from .location_rules import cluster_problems
from .logging import LoggingConfig, WandbConfig
from .models import (
    ModelsConfig,
    ModelSource,
    RandomInit,
    RemoteReward,
    RewardErrorPolicy,
    RewardFunction,
    RewardFunctionLimits,
    RewardModel,
)
from .modelsize import local_config_reader
from .objective import (
    PolicyLoss,
    RolloutCorrectionConfig,
    RolloutCorrectionLevel,
    RolloutCorrectionMode,
)
from .outcome import ExitCode, FailureClass
from .placement import Device, PlacementConfig, Toleration
from .resolve import resolve_job
from .rollout import AgentConfig, AgentMode, RolloutConfig, RolloutEngine
from .training import AttnImplementation, LoRAConfig, LRScheduler, TrainingConfig

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "KIND",
    "RESUME_LATEST",
    "AgentConfig",
    "AgentMode",
    "AlgorithmConfig",
    "AlgorithmName",
    "AttnImplementation",
    "BestMode",
    "CheckpointConfig",
    "CheckpointStorage",
    "ConfigModel",
    "DataConfig",
    "DatasetSource",
    "Device",
    "DeviceGroup",
    "EgressPolicy",
    "EnvVar",
    "ExitCode",
    "FailureClass",
    "JobConfig",
    "JobSpec",
    "KLEstimator",
    "KeepBest",
    "LRScheduler",
    "Layout",
    "LayoutError",
    "LoRAConfig",
    "LoadedJob",
    "LoggingConfig",
    "LossAggregation",
    "ModelSource",
    "ModelsConfig",
    "NetworkConfig",
    "PlacementConfig",
    "PodGroup",
    "PolicyLoss",
    "Problem",
    "RandomInit",
    "RemoteReward",
    "ResumePolicy",
    "RewardErrorPolicy",
    "RewardFunction",
    "RewardFunctionLimits",
    "RewardModel",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "RolloutCorrectionLevel",
    "RolloutCorrectionMode",
    "RolloutEngine",
    "RunPolicy",
    "SecretKeyRef",
    "SecretRefs",
    "Toleration",
    "TrainingConfig",
    "WandbConfig",
    "cluster_problems",
    "describe_layout",
    "load_document",
    "load_file",
    "local_config_reader",
    "plan_layout",
    "resolve_job",
    "role_devices",
    "validation_messages",
]
