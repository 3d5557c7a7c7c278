"""Where a job's roles run: one pure plan that the operator, the trainer and `rlhf plan` share.

1. `role_devices`: the roles this spec really runs and the devices each needs. A role the spec
   does not use gets nothing: no reference without a KL term (`algorithm.klCoef: 0`), for the
   SFT-like trainers, reward-model training and rejection sampling, or with
   `algorithm.refreshReference`; a teacher for distillation only; no critic outside PPO, no
   reward devices without reward models, no rollout devices with `rollout.engine: hf` (it
   generates with the actor's own model).
2. Colocation merges roles into device groups that share the same devices: actor+reference
   (or distillation's actor+teacher: `colocateActorReference`), critic+reward, or everything
   (the hybrid engine, `colocateAll`). Several reward models share the reward devices (each
   is its own data-parallel group on them).
3. Groups are cut into placement units: one device per DeepSpeed rank, `tensorParallelSize`
   devices per vLLM engine (an engine's tensor-parallel ranks must share a node).
4. Units are packed first-fit-decreasing into pods of `placement.gpusPerNode` devices; pods
   that use the same number of devices form one pod group (one Ray worker group on a cluster).
   The packing proves a layout with that many pods exists; Ray's placement groups then place
   the trainer's bundles inside them. For power-of-two tensor-parallel sizes that divide
   `gpusPerNode` (the usual case) first-fit-decreasing uses the fewest pods.

With `placement.auto` the counts, colocation and engines come first from `autoplace.decide`
(the model sizes and the GPUs); the layout is then built from the chosen values, and carries
the choice with its reasons.

The operator requests exactly `Layout.pods` and the trainer asks Ray for exactly
`Layout.groups`, so the GPUs a job holds are the GPUs it uses.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .autoplace import apply_choice, decide
from .autoplan import AutoChoice, AutoError
from .base import Problem
from .modelsize import ConfigReader
from .placement import Device
from .roles import (
    ACTOR,
    CRITIC,
    REFERENCE,
    REWARD,
    ROLE_ORDER,
    ROLLOUT,
    TEACHER,
    active_roles,
)

if TYPE_CHECKING:
    from .job import JobConfig


@dataclass(frozen=True)
class DeviceGroup:
    """Roles that share the same `devices`; placement units of `unit` devices each."""

    roles: tuple[str, ...]
    devices: int
    unit: int = 1

    @property
    def name(self) -> str:
        return "+".join(self.roles)


@dataclass(frozen=True)
class PodGroup:
    """`replicas` pods with `devices` devices each, hosting ranks of `roles`."""

    name: str
    replicas: int
    devices: int
    roles: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    device: Device
    groups: tuple[DeviceGroup, ...]
    rollout_engines: int
    tensor_parallel_size: int
    pods: tuple[PodGroup, ...]
    auto: AutoChoice | None = None  # what placement.auto chose, and why

    @property
    def total_devices(self) -> int:
        return sum(g.devices for g in self.groups)

    def group_of(self, role: str) -> DeviceGroup:
        for group in self.groups:
            if role in group.roles:
                return group
        placed = ", ".join(r for g in self.groups for r in g.roles)
        raise KeyError(f"role {role!r} is not placed; placed roles: {placed}")

    def roles(self) -> list[str]:
        return [r for g in self.groups for r in g.roles]

    def to_dict(self) -> dict[str, Any]:
        """The plan as `rlhf plan --output json` prints it (camelCase, like the API)."""
        return {
            "device": self.device.value,
            "roles": {
                role: {"devices": g.devices, "group": g.name}
                for g in self.groups
                for role in g.roles
            },
            "groups": [
                {"name": g.name, "devices": g.devices, "roles": list(g.roles)} for g in self.groups
            ],
            "rollout": {
                "engines": self.rollout_engines,
                "tensorParallelSize": self.tensor_parallel_size,
            },
            "totalDevices": self.total_devices,
            "pods": [
                {
                    "name": p.name,
                    "replicas": p.replicas,
                    "devices": p.devices,
                    "roles": list(p.roles),
                }
                for p in self.pods
            ],
            **({"auto": _auto_dict(self.auto)} if self.auto is not None else {}),
        }


def _auto_dict(choice: AutoChoice) -> dict[str, Any]:
    return {
        "layout": choice.mode.value,
        "zeroStage": choice.zero.stage,
        "adamOffload": choice.zero.offload,
        "reasons": dict(choice.reasons),
    }


class LayoutError(ValueError):
    """No layout exists; `problems` name the fields to change."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(p.render() for p in problems))
        self.problems = problems


def role_devices(cfg: JobConfig) -> dict[str, int]:
    """Devices each role of this spec needs, before colocation; only roles it runs."""
    p, r = cfg.placement, cfg.rollout
    counts = {
        ACTOR: p.actor_gpus,
        REFERENCE: p.reference_gpus,
        TEACHER: p.teacher_gpus,
        CRITIC: p.critic_gpus,
        REWARD: p.reward_gpus,
        ROLLOUT: r.num_engines * r.tensor_parallel_size,
    }
    return {role: counts[role] for role in active_roles(cfg)}


def _ordered(roles: set[str] | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    return tuple(r for r in ROLE_ORDER if r in roles)


def _colocated(cfg: JobConfig, roles: dict[str, int]) -> list[tuple[str, ...]]:
    """The role tuples that share devices, per the placement's colocation flags."""
    p = cfg.placement
    if p.colocate_all:
        return [_ordered(list(roles))]
    pairs: list[tuple[str, ...]] = []
    for enabled, pair in (
        (p.colocate_actor_reference, (ACTOR, REFERENCE)),
        (p.colocate_actor_reference, (ACTOR, TEACHER)),
        (p.colocate_critic_reward, (CRITIC, REWARD)),
    ):
        if enabled and all(r in roles for r in pair):
            pairs.append(pair)
    return pairs


def layout_problems(cfg: JobConfig) -> list[Problem]:
    """Why no layout exists for this spec (empty when one does)."""
    p, tp = cfg.placement, cfg.rollout.tensor_parallel_size
    roles = role_devices(cfg)
    out: list[Problem] = []
    for shared in _colocated(cfg, roles):
        counts = {roles[r] for r in shared}
        if len(counts) < 2:
            continue
        shown = ", ".join(f"{r}={roles[r]}" for r in shared)
        if p.colocate_all:
            out.append(
                Problem(
                    "placement.colocateAll",
                    "the hybrid engine puts every model and the vLLM engines on the same "
                    "devices, so each role needs the same count (rollout = numEngines x "
                    f"tensorParallelSize); got {shown}",
                )
            )
        else:
            flag = "colocateActorReference" if ACTOR in shared else "colocateCriticReward"
            first, second = (f"{role}Gpus" for role in shared)
            out.append(
                Problem(
                    f"placement.{flag}",
                    f"needs {first} == {second}: colocated roles share devices "
                    f"(got {roles[shared[0]]} and {roles[shared[1]]})",
                )
            )
    if ROLLOUT in roles and tp > p.gpus_per_node:
        out.append(
            Problem(
                "rollout.tensorParallelSize",
                f"a vLLM engine's {tp} tensor-parallel devices must share one node: at most "
                f"placement.gpusPerNode ({p.gpus_per_node}); lower tensorParallelSize or raise "
                "gpusPerNode",
            )
        )
    return out + _tensor_parallel_problems(cfg)


def _tensor_parallel_problems(cfg: JobConfig) -> list[Problem]:
    """A tensor-parallel engine splits attention heads and MLP columns evenly over its ranks
    (vLLM refuses other sizes at start-up); known here only for a random-init actor."""
    tp, spec = cfg.rollout.tensor_parallel_size, cfg.models.actor.random_init
    if tp == 1 or spec is None or ROLLOUT not in role_devices(cfg):
        return []
    uneven = [
        (name, size)
        for name, size in (
            ("numHeads", spec.num_heads),
            ("intermediateSize", spec.intermediate_size),
        )
        if size % tp
    ]
    return [
        Problem(
            "rollout.tensorParallelSize",
            f"must divide models.actor.randomInit.{name} ({size}): each of the engine's ranks "
            f"holds an equal share; got {tp}",
        )
        for name, size in uneven
    ]


def device_groups(cfg: JobConfig) -> list[DeviceGroup]:
    """Roles merged by colocation (for a spec without layout problems)."""
    roles = role_devices(cfg)
    tp = cfg.rollout.tensor_parallel_size
    shared = _colocated(cfg, roles)
    groups: list[DeviceGroup] = []
    for role in ROLE_ORDER:
        if role not in roles:
            continue
        together = next((s for s in shared if role in s), (role,))
        if together[0] != role:
            continue  # listed with the first role of its group
        unit = tp if ROLLOUT in together else 1
        groups.append(DeviceGroup(together, roles[role], unit))
    return groups


def _pack(groups: list[DeviceGroup], capacity: int) -> list[tuple[int, set[str]]]:
    """First-fit decreasing: (used devices, roles) per pod."""
    units = [(g.unit, g.roles) for g in groups for _ in range(g.devices // g.unit)]
    units.sort(key=lambda u: -u[0])  # stable: equal sizes keep the role order
    pods: list[tuple[int, set[str]]] = []
    for size, roles in units:
        for i, (used, pod_roles) in enumerate(pods):
            if used + size <= capacity:
                pods[i] = (used + size, pod_roles | set(roles))
                break
        else:
            pods.append((size, set(roles)))
    return pods


def plan_layout(cfg: JobConfig, read_config: ConfigReader | None = None) -> Layout:
    """The layout of this job; raises LayoutError naming the fields when none exists.
    `read_config`: reads a local model's config.json (`placement.auto` sizes; not on the
    operator)."""
    choice = None
    if cfg.placement.auto:
        try:
            choice = decide(cfg, read_config)
        except AutoError as err:
            raise LayoutError(err.problems) from err
        cfg = apply_choice(cfg, choice)
    problems = layout_problems(cfg)
    if problems:
        raise LayoutError(problems)
    p, r = cfg.placement, cfg.rollout
    groups = device_groups(cfg)
    by_size: dict[int, tuple[int, set[str]]] = defaultdict(lambda: (0, set()))
    for used, roles in _pack(groups, p.gpus_per_node):
        count, shape_roles = by_size[used]
        by_size[used] = (count + 1, shape_roles | roles)
    prefix = "gpu" if p.device is Device.GPU else "cpu"
    pods = tuple(
        PodGroup(f"{prefix}{size}", count, size, _ordered(roles))
        for size, (count, roles) in sorted(by_size.items(), reverse=True)
    )
    has_rollout = any(ROLLOUT in g.roles for g in groups)
    return Layout(
        device=p.device,
        groups=tuple(groups),
        rollout_engines=r.num_engines if has_rollout else 0,
        tensor_parallel_size=r.tensor_parallel_size if has_rollout else 1,
        pods=pods,
        auto=choice,
    )


def describe_layout(layout: Layout) -> str:
    """`rlhf plan`'s text: one line per role, then engines, total devices and pods."""
    unit = "GPUs" if layout.device is Device.GPU else "CPU ranks"
    lines = []
    for group in layout.groups:
        shared = f" (shares {group.name})" if len(group.roles) > 1 else ""
        for role in group.roles:
            lines.append(f"{role:<10} {group.devices} {unit}{shared}")
    if layout.rollout_engines:
        lines.append(
            f"engines    {layout.rollout_engines} x tensor parallel {layout.tensor_parallel_size}"
        )
    lines.append(f"total      {layout.total_devices} {unit}")
    for pod in layout.pods:
        lines.append(
            f"pods       {pod.replicas} x {pod.devices} {unit} [{pod.name}]: {', '.join(pod.roles)}"
        )
    if layout.auto is not None:
        lines.append(f"auto       {layout.auto.mode.value}, {layout.auto.zero.label}")
        lines.extend(f"  {key:<9} {why}" for key, why in layout.auto.reasons.items())
    return "\n".join(lines)
