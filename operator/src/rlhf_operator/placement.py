"""Placement plan: an RLHFJob spec -> `Allocation` (pure).

1. Devices per role come from `rlhf_trainer.config.role_devices` (the roles the algorithm uses;
   the trainer asks Ray for exactly these).
2. Colocation merges roles into device groups that share devices: actor+reference,
   critic+reward, or everything (the hybrid engine, `colocateAll`).
3. Groups are cut into placement units: one device per DeepSpeed rank, and `tensorParallelSize`
   devices per vLLM engine, because an engine's tensor-parallel ranks must share a node.
4. Units are packed first-fit-decreasing into nodes of `gpusPerNode` devices; nodes with the
   same number of used devices form one Ray worker group (one pod shape). The head pod has no
   devices.

The packing proves that a layout exists with that many pods; Ray's placement groups then place
the trainer's bundles inside them. For power-of-two tensor-parallel sizes that divide
`gpusPerNode` (the usual case) first-fit-decreasing uses the minimum number of nodes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from rlhf_trainer.config import Device, JobConfig, role_devices

from .api.v1alpha1 import Allocation, WorkerGroupAllocation

# Canonical order of roles in group names and listings.
ROLE_ORDER = ("actor", "reference", "critic", "reward", "rollout")


class PlacementError(ValueError):
    """A layout that cannot be built. `field` is the spec field to change (camelCase path)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class DeviceGroup:
    """Roles that share the same devices, how many devices, and the unit they come in."""

    roles: tuple[str, ...]
    devices: int
    unit: int = 1

    @property
    def name(self) -> str:
        return "+".join(self.roles)


def _ordered(roles: set[str] | list[str]) -> tuple[str, ...]:
    return tuple(r for r in ROLE_ORDER if r in roles)


def device_groups(cfg: JobConfig) -> list[DeviceGroup]:
    """Roles merged by colocation. Raises PlacementError where colocation cannot hold."""
    roles = role_devices(cfg)
    p, tp = cfg.placement, cfg.rollout.tensor_parallel_size
    rollout_unit = tp if "rollout" in roles else 1
    if p.colocate_all:
        counts = set(roles.values())
        if len(counts) != 1:
            shown = ", ".join(f"{r}={n}" for r, n in roles.items())
            raise PlacementError(
                "spec.placement.colocateAll",
                "the hybrid engine puts every model and the vLLM engines on the same devices, "
                "so every role needs the same device count (rollout = rollout.numEngines x "
                f"rollout.tensorParallelSize); got {shown}",
            )
        return [DeviceGroup(_ordered(list(roles)), counts.pop(), rollout_unit)]

    merged: list[tuple[str, ...]] = []
    pairs = (
        (p.colocate_actor_reference, ("actor", "reference"), "colocateActorReference"),
        (p.colocate_critic_reward, ("critic", "reward"), "colocateCriticReward"),
    )
    for enabled, pair, field in pairs:
        present = [r for r in pair if r in roles]
        if not enabled or len(present) < 2:
            continue
        if roles[pair[0]] != roles[pair[1]]:
            raise PlacementError(
                f"spec.placement.{field}",
                f"colocated roles share devices, so they need the same count; got "
                f"{pair[0]}={roles[pair[0]]} and {pair[1]}={roles[pair[1]]}",
            )
        merged.append(pair)

    groups: list[DeviceGroup] = []
    grouped = {r for pair in merged for r in pair}
    for role in ROLE_ORDER:
        if role not in roles:
            continue
        shared = next((m for m in merged if m[0] == role), None)
        if shared is not None:
            groups.append(DeviceGroup(shared, roles[role]))
        elif role not in grouped:
            groups.append(DeviceGroup((role,), roles[role], tp if role == "rollout" else 1))
    return groups


def _pack(groups: list[DeviceGroup], capacity: int) -> list[tuple[int, set[str]]]:
    """First-fit decreasing: (used devices, roles) per node."""
    units = [(g.unit, g.roles) for g in groups for _ in range(g.devices // g.unit)]
    units.sort(key=lambda u: -u[0])  # stable: equal sizes keep the role order
    nodes: list[tuple[int, set[str]]] = []
    for size, roles in units:
        for i, (used, node_roles) in enumerate(nodes):
            if used + size <= capacity:
                nodes[i] = (used + size, node_roles | set(roles))
                break
        else:
            nodes.append((size, set(roles)))
    return nodes


def plan(cfg: JobConfig) -> Allocation:
    """The allocation for a job config (an RLHFJob's spec is one). Pure; raises
    PlacementError naming the field to change when no layout exists."""
    p, r = cfg.placement, cfg.rollout
    groups = device_groups(cfg)
    for group in groups:
        if group.unit > p.gpus_per_node:
            raise PlacementError(
                "spec.rollout.tensorParallelSize",
                f"a vLLM engine's {group.unit} tensor-parallel devices must share one node, "
                f"but placement.gpusPerNode is {p.gpus_per_node}: lower tensorParallelSize or "
                "raise gpusPerNode",
            )
        if group.devices % group.unit:
            raise PlacementError(
                "spec.placement.colocateAll",
                f"{group.name} has {group.devices} devices, not a multiple of "
                f"rollout.tensorParallelSize ({group.unit})",
            )
    nodes = _pack(groups, p.gpus_per_node)
    by_shape: dict[int, tuple[int, set[str]]] = defaultdict(lambda: (0, set()))
    for used, roles in nodes:
        count, shape_roles = by_shape[used]
        by_shape[used] = (count + 1, shape_roles | roles)
    prefix = "gpu" if p.device is Device.GPU else "cpu"
    worker_groups = [
        WorkerGroupAllocation(
            name=f"{prefix}{size}", replicas=count, gpus_per_pod=size, roles=list(_ordered(roles))
        )
        for size, (count, roles) in sorted(by_shape.items(), reverse=True)
    ]
    has_rollout = "rollout" in role_devices(cfg)
    return Allocation(
        device=p.device,
        gpus_per_role={g.name: g.devices for g in groups},
        rollout_engines=r.num_engines if has_rollout else 0,
        tensor_parallel_size=r.tensor_parallel_size if has_rollout else 1,
        worker_groups=worker_groups,
        total_gpus=sum(g.devices for g in groups),
    )
