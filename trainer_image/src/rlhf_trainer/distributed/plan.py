"""Placement plan: which role's ranks share which devices (pure; no Ray here).

OpenRLHF's colocation options map to placement groups of "device" bundles:

- separate (default): one placement group per role; every rank owns a whole device;
- `colocateActorReference`: actor and reference ranks share the same bundles, half each;
- `colocateCriticReward`: critic and reward-model ranks share bundles;
- `colocateAll` (hybrid engine): every model and the vLLM engines share one set of bundles.

With `algorithm.klCoef: 0` there is no KL term, and no reference rank is placed.

A bundle asks for one unit of `placement.rayResource`: `GPU` on GPU machines; on CPU machines a
custom resource (e.g. `GPU-like`) that the local Ray start declares, so the same placement logic
runs, and is tested, without a GPU. Ranks that share a bundle ask for a fraction of it, so Ray
places them together and refuses a plan that does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlhf_trainer.config import JobConfig, role_devices

ACTOR, REFERENCE, CRITIC, REWARD, ROLLOUT = "actor", "reference", "critic", "reward", "rollout"
# Ray schedules fractions in units of 1e-4; a share never goes below this.
MIN_FRACTION = 0.01


@dataclass(frozen=True)
class RoleShare:
    """`ranks` ranks of `role`, rank i on bundle i of its group, each asking `fraction`."""

    role: str
    ranks: int
    fraction: float


@dataclass(frozen=True)
class GroupPlan:
    """One placement group: `devices` bundles shared by the roles in `shares`."""

    name: str
    devices: int
    shares: tuple[RoleShare, ...]


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
            parts = ", ".join(f"{s.role} {s.ranks}x{s.fraction:g}" for s in g.shares)
            lines.append(f"{g.name}: {g.devices} x {self.resource} ({parts})")
        return "\n".join(lines)


def reward_role(index: int) -> str:
    """Role name of the index-th reward model (each is its own data-parallel group)."""
    return f"{REWARD}{index}"


def _shared(name: str, devices: int, roles: list[tuple[str, int]]) -> GroupPlan:
    # Equal shares that sum to at most 1, rounded down to Ray's resolution.
    fraction = max(MIN_FRACTION, int(10000 / len(roles)) / 10000)
    return GroupPlan(name, devices, tuple(RoleShare(r, n, fraction) for r, n in roles))


def plan_placement(cfg: JobConfig) -> PlacementPlan:
    """The placement groups for this job's roles (those its algorithm uses).

    Raises ValueError for what this trainer cannot place (tensor-parallel vLLM engines).
    """
    if cfg.rollout.tensor_parallel_size != 1 and cfg.rollout.engine.value == "vllm":
        raise ValueError(
            "rollout.tensorParallelSize > 1 is not implemented yet in this trainer (each vLLM "
            f"engine uses one device); got {cfg.rollout.tensor_parallel_size}"
        )
    devices = role_devices(cfg)
    if cfg.algorithm.kl_coef == 0:
        # No KL term (in the reward or the loss): the reference policy is never needed, so
        # it is not started at all (OpenRLHF does the same for init_kl_coef = 0).
        devices.pop(REFERENCE, None)
    p = cfg.placement
    rewards = [(reward_role(i), p.reward_gpus) for i in range(len(cfg.models.reward_models))]
    engine = cfg.rollout.engine.value
    # The HF fallback generates with the actor's own model: no engine ranks are placed.
    rollout = (
        [(ROLLOUT, cfg.rollout.num_engines)] if engine == "vllm" and ROLLOUT in devices else []
    )

    if p.colocate_all:
        roles = [(ACTOR, p.actor_gpus)]
        roles += [(REFERENCE, p.reference_gpus)] if REFERENCE in devices else []
        roles += [(CRITIC, p.critic_gpus)] if CRITIC in devices else []
        roles += rewards + rollout
        return PlacementPlan(p.ray_resource, (_shared("all", p.actor_gpus, roles),))

    groups: list[GroupPlan] = []
    if REFERENCE in devices and p.colocate_actor_reference:
        groups.append(
            _shared(
                "actor+reference", p.actor_gpus, [(ACTOR, p.actor_gpus), (REFERENCE, p.actor_gpus)]
            )
        )
    else:
        groups.append(_shared(ACTOR, p.actor_gpus, [(ACTOR, p.actor_gpus)]))
        if REFERENCE in devices:
            groups.append(_shared(REFERENCE, p.reference_gpus, [(REFERENCE, p.reference_gpus)]))

    if CRITIC in devices and rewards and p.colocate_critic_reward:
        groups.append(_shared("critic+reward", p.critic_gpus, [(CRITIC, p.critic_gpus), *rewards]))
    else:
        if CRITIC in devices:
            groups.append(_shared(CRITIC, p.critic_gpus, [(CRITIC, p.critic_gpus)]))
        for role, n in rewards:
            groups.append(_shared(role, n, [(role, n)]))
    if rollout:
        groups.append(_shared(ROLLOUT, cfg.rollout.num_engines, rollout))
    return PlacementPlan(p.ray_resource, tuple(groups))
