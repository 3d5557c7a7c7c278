"""The model of `placement.auto` (config/autoplace.py decides with it): the sizes of a job's
models, the cluster, and what a group of roles sharing N GPUs needs on each (config/memory.py
has the arithmetic)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from .base import Problem
from .memory import (
    HOST_FRACTION,
    KV_FACTOR,
    Zero,
    engine_weights_gib,
    frozen_gib,
    host_gib,
    trained_gib,
    usable_gib,
)
from .models import ModelSource
from .modelsize import ConfigReader, ModelSize, source_size
from .roles import ACTOR, CRITIC, REFERENCE, REWARD, ROLLOUT

if TYPE_CHECKING:
    from .job import JobConfig

Group = tuple[str, ...]


class AutoError(ValueError):
    """No automatic layout: `problems` name the fields to change. `size_unknown`: only because
    the actor's size cannot be told here (a reader of its config.json may still tell it)."""

    def __init__(self, problems: list[Problem], *, size_unknown: bool = False) -> None:
        super().__init__("\n".join(p.render() for p in problems))
        self.problems = problems
        self.size_unknown = size_unknown


class Mode(StrEnum):
    SEPARATE = "distributed"
    PAIRS = "colocated pairs"
    HYBRID = "hybrid engine"


@dataclass(frozen=True)
class Sizes:
    by_role: dict[str, tuple[ModelSize, ...]]  # reward: one per reward model

    def params(self, role: str) -> int:
        return sum(s.params for s in self.by_role[role])


@dataclass(frozen=True)
class Cluster:
    gpus: int
    per_node: int
    gpu_gib: float
    vllm_utilization: float
    host_per_gpu_gib: float  # placement.resources.workerMemoryPerGpu

    @property
    def usable(self) -> float:
        return usable_gib(self.gpu_gib)

    @property
    def host_usable(self) -> float:
        return HOST_FRACTION * self.host_per_gpu_gib


@dataclass(frozen=True)
class AutoChoice:
    mode: Mode
    zero: Zero
    devices: dict[str, int]  # per role; rollout = engines x tensor parallel
    tensor_parallel: int
    vllm_utilization: float | None  # set for the hybrid engine only
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def engines(self) -> int:
        return self.devices.get(ROLLOUT, 0) // self.tensor_parallel


def job_sizes(cfg: JobConfig, read_config: ConfigReader | None = None) -> Sizes:
    """Parameters of each role's model(s); AutoError(size_unknown) without the actor's."""
    stated, m = cfg.placement.model_size, cfg.models
    actor = source_size(m.actor, stated=stated, read_config=read_config)
    if actor is None:
        why = (
            f"cannot tell the size of the actor ({m.actor.label}) here (no size in its name, "
            "no config.json readable, or another job's model); set placement.modelSize, e.g. 7B"
        )
        raise AutoError([Problem("placement.modelSize", why)], size_unknown=True)
    assumed = ModelSize(actor.params, "assumed the actor's size")

    def size(source: ModelSource, scoring: bool) -> ModelSize:
        found = source_size(source, stated=stated, read_config=read_config, scoring=scoring)
        return found or assumed

    return Sizes(
        {
            ACTOR: (actor,),
            ROLLOUT: (actor,),
            REFERENCE: (size(m.resolved_reference(), False),),
            CRITIC: (size(m.resolved_critic(), True),),
            REWARD: tuple(size(rm, True) for rm in m.reward_models),
        }
    )


def need(role: str, sizes: Sizes, ranks: int, zero: Zero) -> float:
    """GiB per GPU of one DeepSpeed role on `ranks` GPUs."""
    if role in (ACTOR, CRITIC):
        return trained_gib(sizes.params(role), ranks, zero)
    return sum(frozen_gib(s.params, ranks, zero) for s in sizes.by_role[role])


def engine_need(sizes: Sizes, tp: int) -> float:
    return KV_FACTOR * engine_weights_gib(sizes.params(ROLLOUT), tp)


def powers(limit: int) -> list[int]:
    return [2**i for i in range(13) if 2**i <= limit]


def group_host(group: Group, sizes: Sizes, n: int, zero: Zero) -> float:
    """GiB of host memory per GPU of a group: its trained roles' offloaded Adam states."""
    return sum(host_gib(sizes.params(r), n, zero) for r in group if r in (ACTOR, CRITIC))


def group_need(group: Group, sizes: Sizes, n: int, zero: Zero, tp: int) -> float:
    models = sum(need(r, sizes, n, zero) for r in group if r != ROLLOUT)
    return models + (engine_need(sizes, tp) if ROLLOUT in group else 0.0)


def fewest(group: Group, sizes: Sizes, zero: Zero, c: Cluster, cap: int) -> tuple[int, int] | None:
    """(GPUs, tensor parallel) of the smallest fitting count of a group, up to `cap` (the
    offloaded states must fit the pods' host memory too)."""
    if group == (ROLLOUT,):  # an engine alone has vLLM's share of each GPU
        for tp in powers(c.per_node):
            if engine_need(sizes, tp) <= c.vllm_utilization * c.gpu_gib:
                return (tp, tp) if tp <= cap else None
        return None
    for n in powers(cap):
        if group_host(group, sizes, n, zero) > c.host_usable:
            continue
        tps = powers(min(n, c.per_node)) if ROLLOUT in group else [1]
        for tp in tps:
            if group_need(group, sizes, n, zero, tp) <= c.usable:
                return n, tp
    return None


def groups_of(mode: Mode, roles: Group) -> list[Group] | None:
    """The device groups of a mode; None where the mode is the same as a sparser one."""
    if mode is Mode.HYBRID:
        return [roles] if ROLLOUT in roles and len(roles) > 1 else None
    if mode is Mode.SEPARATE:
        return [(r,) for r in roles]
    pairs = [p for p in ((ACTOR, REFERENCE), (CRITIC, REWARD)) if set(p) <= set(roles)]
    if not pairs:
        return None
    paired = {r for p in pairs for r in p}
    return [*pairs, *((r,) for r in roles if r not in paired)]
