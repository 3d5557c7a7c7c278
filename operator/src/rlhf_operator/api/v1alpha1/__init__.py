"""RLHFJob v1alpha1 (group rlhf.dev): spec = the trainer's job config + Kubernetes parts."""

from .status import (
    Allocation,
    Condition,
    ConditionReason,
    ConditionStatus,
    ConditionType,
    JobOutput,
    Phase,
    RayJobRef,
    RLHFJobStatus,
    TrainerCheckpoint,
    TrainerOutcome,
    TrainerReport,
    Usage,
    WorkerGroupAllocation,
)
from .types import GROUP, KIND, LIST_KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION, RLHFJob

__all__ = [
    "GROUP",
    "KIND",
    "LIST_KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "Allocation",
    "Condition",
    "ConditionReason",
    "ConditionStatus",
    "ConditionType",
    "JobOutput",
    "Phase",
    "RLHFJob",
    "RLHFJobStatus",
    "RayJobRef",
    "TrainerCheckpoint",
    "TrainerOutcome",
    "TrainerReport",
    "Usage",
    "WorkerGroupAllocation",
]
