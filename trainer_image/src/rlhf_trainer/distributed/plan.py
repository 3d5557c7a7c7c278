"""Placement groups for the job's roles, from the shared layout (pure; no Ray here).

`rlhf_trainer.config.layout` decides which roles run and which share devices (the operator
requests pods from the very same layout). Each device group becomes one placement group of
"device" bundles; the roles sharing it each ask for an equal fraction of every bundle, so Ray
places them together and refuses a plan that does not fit:

- separate (default): one placement group per role; every rank owns a whole device;
- `colocateActorReference`: actor and reference ranks share the same bundles;
- `colocateCriticReward`: critic and reward-model ranks share bundles; several reward models
  share the reward devices, each its own data-parallel group on them;
- `colocateAll` (hybrid engine): every model and the vLLM engines share one set of bundles.

A device group whose placement unit is larger than one device (a vLLM engine's
`tensorParallelSize` devices, alone or in the hybrid engine) becomes one placement group per
unit instead, kept on one node (`STRICT_PACK`): an engine's tensor-parallel ranks never span
nodes, as the operator's pods (`config.layout`) promise. Rank i of a role sits on the bundle
holding its first device; an engine's first device hosts the engine actor, the rest of its
unit its tensor-parallel workers (vLLM's own processes or Ray actors).

A bundle asks for one unit of `placement.rayResource`: `GPU` on GPU machines; on CPU machines a
custom resource (e.g. `GPU-like`) that the local Ray start declares, so the same placement logic
runs, and is tested, without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlhf_trainer.config import JobConfig, ModelSource, plan_layout, resolve_job
from rlhf_trainer.config.roles import ACTOR, CRITIC, REFERENCE, REWARD, ROLLOUT, TEACHER

__all__ = [
    "ACTOR",
    "CRITIC",
    "REFERENCE",
    "REWARD",
    "ROLLOUT",
    "TEACHER",
    "GroupPlan",
    "PlacementPlan",
    "RoleShare",
    "plan_placement",
    "reward_role",
    "role_source",
]
# Ray schedules fractions in units of 1e-4; a share never goes below this.
MIN_FRACTION = 0.01


@dataclass(frozen=True)
class RoleShare:
    """`ranks` ranks of `role`, each asking `fraction` of every bundle it uses and spanning
    `span` devices (an engine's tensor-parallel size; 1 for a model rank)."""

    role: str
    ranks: int
    fraction: float
    span: int = 1


@dataclass(frozen=True)
class GroupPlan:
    """`devices` bundles shared by the roles in `shares`, in placement groups of `set_size`
    bundles each (one group of all devices, or one per tensor-parallel engine unit)."""

    name: str
    devices: int
    shares: tuple[RoleShare, ...]
    set_size: int = 0  # 0: all the devices in one placement group

    @property
    def bundles_per_set(self) -> int:
        return self.set_size or self.devices

    @property
    def sets(self) -> int:
        return self.devices // self.bundles_per_set

    @property
    def strategy(self) -> str:
        """A tensor-parallel unit must stay on one node; a whole group only prefers to."""
        return "STRICT_PACK" if self.set_size else "PACK"

    def slots(self, share: RoleShare) -> list[tuple[int, int]]:
        """(placement group, bundle) of each rank's first device."""
        return [divmod(rank * share.span, self.bundles_per_set) for rank in range(share.ranks)]


@dataclass(frozen=True)
class PlacementPlan:
    resource: str
    groups: tuple[GroupPlan, ...]

    @property
    def total_devices(self) -> int:
        return sum(g.devices for g in self.groups)

    def locate(self, role: str) -> tuple[GroupPlan, RoleShare]:
        for group in self.groups:
            for share in group.shares:
                if share.role == role:
                    return group, share
        known = sorted(s.role for g in self.groups for s in g.shares)
        raise KeyError(f"role {role!r} is not placed; placed roles: {', '.join(known)}")

    def roles(self) -> list[str]:
        return [s.role for g in self.groups for s in g.shares]

    def describe(self) -> str:
        """One line per placement group, e.g. `actor+reference: 1 x GPU-like (actor 0.5, ...)`."""
        lines = []
        for g in self.groups:
            parts = ", ".join(
                f"{s.role} {s.ranks}x{s.fraction:g}" + (f" tp {s.span}" if s.span > 1 else "")
                for s in g.shares
            )
            sets = f" in {g.sets} sets of {g.set_size}" if g.set_size else ""
            lines.append(f"{g.name}: {g.devices} x {self.resource}{sets} ({parts})")
        return "\n".join(lines)


def reward_role(index: int) -> str:
    """Role name of the index-th reward model (each is its own data-parallel group)."""
    return f"{REWARD}{index}"


def role_source(cfg: JobConfig, role: str) -> ModelSource:
    """Where the weights of `role` come from (the actor's for the vLLM engines)."""
    models = cfg.models
    if role in (ACTOR, ROLLOUT):
        return models.actor
    if role == CRITIC:
        return models.resolved_critic()
    if role == REFERENCE:
        return models.resolved_reference()
    if role == TEACHER and models.teacher is not None:
        return models.teacher
    index = role.removeprefix(REWARD)
    if role.startswith(REWARD) and index.isdigit() and int(index) < len(models.reward_models):
        return models.reward_models[int(index)]
    raise KeyError(f"role {role!r} has no model source")


def _shared(name: str, devices: int, roles: list[tuple[str, int]], unit: int, tp: int) -> GroupPlan:
    # Equal shares that sum to at most 1, rounded down to Ray's resolution.
    fraction = max(MIN_FRACTION, int(10000 / len(roles)) / 10000)
    shares = tuple(RoleShare(r, n, fraction, tp if r == ROLLOUT else 1) for r, n in roles)
    return GroupPlan(name, devices, shares, unit if unit > 1 else 0)


def plan_placement(cfg: JobConfig) -> PlacementPlan:
    """The placement groups for this job's roles (those the layout places). A
    `placement.auto` job is placed as `resolve_job` resolves it (the runner has resolved it
    already, with the local models' config.json; this is the same choice without them)."""
    cfg = resolve_job(cfg)
    layout = plan_layout(cfg)
    ranks = {ACTOR: cfg.placement.actor_gpus, REFERENCE: cfg.placement.reference_gpus}
    ranks |= {TEACHER: cfg.placement.teacher_gpus}
    ranks |= {CRITIC: cfg.placement.critic_gpus, ROLLOUT: layout.rollout_engines}
    groups = []
    for group in layout.groups:
        shares: list[tuple[str, int]] = []
        for role in group.roles:
            if role == REWARD:
                models = len(cfg.models.reward_models)
                shares += [(reward_role(i), cfg.placement.reward_gpus) for i in range(models)]
            else:
                shares.append((role, ranks[role]))
        groups.append(
            _shared(group.name, group.devices, shares, group.unit, layout.tensor_parallel_size)
        )
    return PlacementPlan(cfg.placement.ray_resource, tuple(groups))
