"""`spec.placement`: devices per role and colocation (read by the trainer to build Ray
placement groups), plus where pods may run (read by the operator only)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Self

from pydantic import Field, StringConstraints, model_validator

from .base import ConfigModel, Problem, raise_problems
from .modelsize import SIZE_PATTERN
from .names import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    EXTENDED_RESOURCE,
    LABEL_VALUE,
    QUALIFIED_NAME,
    QUALIFIED_NAME_MAX_LENGTH,
    QUANTITY_MAX_LENGTH,
    RAY_RESOURCE,
    RESOURCE_QUANTITY,
    STORAGE_QUANTITY,
)

QUANTITY_PATTERN = RESOURCE_QUANTITY
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
LabelKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=QUALIFIED_NAME_MAX_LENGTH, pattern=QUALIFIED_NAME),
]
LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE)]


class Device(StrEnum):
    GPU = "gpu"
    # CPU-only ranks: laptops, CI, and CPU Kubernetes clusters (e2e on kind).
    CPU = "cpu"


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(ConfigModel):
    """A pod toleration, refused where the API server would refuse it."""

    key: str | None = Field(None, max_length=QUALIFIED_NAME_MAX_LENGTH, pattern=QUALIFIED_NAME)
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str | None = Field(None, max_length=63, pattern=LABEL_VALUE)
    effect: TaintEffect | None = None
    toleration_seconds: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)

    @model_validator(mode="after")
    def _as_the_api_server(self) -> Self:
        problems = []
        if self.operator is TolerationOperator.EXISTS and self.value:
            problems.append(Problem("value", "must be empty with operator: Exists"))
        if not self.key and self.operator is not TolerationOperator.EXISTS:
            problems.append(Problem("operator", "must be Exists when key is empty"))
        if self.toleration_seconds is not None and self.effect is not TaintEffect.NO_EXECUTE:
            problems.append(Problem("tolerationSeconds", "only with effect: NoExecute"))
        raise_problems(problems)
        return self


class PodResources(ConfigModel):
    """CPU and memory for the Ray pods; worker amounts are per GPU of the pod."""

    head_cpu: str = Field("2", pattern=QUANTITY_PATTERN, max_length=QUANTITY_MAX_LENGTH)
    head_memory: str = Field("8Gi", pattern=QUANTITY_PATTERN, max_length=QUANTITY_MAX_LENGTH)
    worker_cpu_per_gpu: str = Field("8", pattern=QUANTITY_PATTERN, max_length=QUANTITY_MAX_LENGTH)
    worker_memory_per_gpu: str = Field(
        "64Gi", pattern=QUANTITY_PATTERN, max_length=QUANTITY_MAX_LENGTH
    )
    # The root filesystem of every pod is read-only: these writable scratch volumes (emptyDir,
    # on the node's disk) have hard limits, so a runaway job is evicted, not the node filled.
    tmp_size: str = Field(
        "64Gi",
        pattern=STORAGE_QUANTITY,
        max_length=QUANTITY_MAX_LENGTH,
        description="/tmp of each pod: Ray's session files, logs and object spilling.",
    )
    cache_size: str = Field(
        "128Gi",
        pattern=STORAGE_QUANTITY,
        max_length=QUANTITY_MAX_LENGTH,
        description="The home directory of each pod: model downloads (HF_HOME) and compile caches.",
    )


class PlacementConfig(ConfigModel):
    device: Device = Device.GPU
    # `auto: true` chooses the per-role counts, colocation, training.zeroStage/adamOffload and
    # rollout.numEngines/tensorParallelSize (config/autoplace.py); the values written for
    # those fields are then ignored. `rlhf plan` shows the choice and why.
    auto: bool = Field(
        False,
        description="Choose GPUs per role, colocation, ZeRO stage/offload and vLLM engines x "
        "tensor parallel from the model size, totalGpus, gpusPerNode and gpuMemoryGiB; the "
        "fields it chooses are ignored (rlhf plan shows the choice and the reasons).",
    )
    total_gpus: int | None = Field(
        None, ge=1, le=4096, description="GPUs placement.auto may use; default: gpusPerNode."
    )
    gpu_memory_gib: float = Field(
        80,
        gt=0,
        le=1024,
        alias="gpuMemoryGiB",
        description="Memory of one GPU in GiB, for placement.auto.",
    )
    model_size: str | None = Field(
        None,
        max_length=32,
        pattern=SIZE_PATTERN,
        description="Parameters of the models (e.g. 7B, 1.5B, 500M) where placement.auto "
        "cannot read them from a randomInit or a config.json it can see; else parsed from the "
        "model's name.",
    )
    # Devices (data-parallel ranks) per role. Rollout engines take
    # rollout.numEngines x rollout.tensorParallelSize more unless colocateAll.
    actor_gpus: int = Field(1, ge=1, le=4096)
    critic_gpus: int = Field(1, ge=1, le=4096)
    reference_gpus: int = Field(1, ge=1, le=4096)
    teacher_gpus: int = Field(1, ge=1, le=4096, description="Devices for a distillation teacher.")
    reward_gpus: int = Field(
        1, ge=1, le=4096, description="Devices for the reward model(s), shared when several."
    )
    colocate_actor_reference: bool = Field(
        False,
        description="Actor and the frozen model it is compared with (the reference, or a "
        "distillation teacher) share devices.",
    )
    colocate_critic_reward: bool = Field(False, description="Critic and reward share devices.")
    colocate_all: bool = Field(
        False, description="Hybrid engine: all models and vLLM engines share the same devices."
    )
    ray_resource: str = Field(
        "GPU",
        min_length=1,
        max_length=63,
        pattern=RAY_RESOURCE,
        description="Ray resource one rank asks for; tests use a custom name on CPU machines.",
    )

    # Kubernetes only: how ranks are packed into pods and where pods may run.
    gpus_per_node: int = Field(8, ge=1, le=64, description="GPUs per worker pod (node size).")
    gpu_resource_name: str = Field(
        "nvidia.com/gpu",
        min_length=1,
        max_length=QUALIFIED_NAME_MAX_LENGTH,
        pattern=EXTENDED_RESOURCE,
    )
    resources: PodResources = Field(default_factory=PodResources)
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=32, description="Node labels every pod requires."
    )
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    priority_class_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN)
    scheduler_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN)
    queue_name: str | None = Field(
        None, max_length=63, pattern=DNS_LABEL, description="Kueue LocalQueue (kueue.x-k8s.io)."
    )
