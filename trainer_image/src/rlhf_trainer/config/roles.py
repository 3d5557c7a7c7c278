"""The roles of a job and which of them a spec runs (shared by the layout and `placement.auto`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .rollout import RolloutEngine

if TYPE_CHECKING:
    from .job import JobConfig

ACTOR, REFERENCE, CRITIC, REWARD, ROLLOUT = "actor", "reference", "critic", "reward", "rollout"
# Distillation's frozen teacher: placed like the reference (its own devices, or the actor's).
TEACHER = "teacher"
# Canonical order of roles in group names and listings.
ROLE_ORDER = (ACTOR, REFERENCE, TEACHER, CRITIC, REWARD, ROLLOUT)
# Every role of a PPO job (the OpenRLHF paper's layouts place these).
PPO_ROLES = (ACTOR, REFERENCE, CRITIC, REWARD, ROLLOUT)


def uses_reference(cfg: JobConfig) -> bool:
    """Offline preference trainers always compare with the reference; online algorithms only
    when a KL term exists (OpenRLHF does not start one for init_kl_coef = 0 either); iterative
    DPO unless the reference is the policy of each round's start (`refreshReference`: the
    actor's own ranks compute it before the round's update)."""
    algo = cfg.algorithm.name
    if not algo.needs_reference:
        return False
    if algo.is_iterative:
        return not cfg.algorithm.refresh_reference
    return not algo.is_online or cfg.algorithm.kl_coef > 0


def active_roles(cfg: JobConfig) -> tuple[str, ...]:
    """The roles this spec runs, in ROLE_ORDER: no reference without a KL term or for SFT and
    reward-model training, a teacher for the distillations only, no critic outside PPO, no reward
    devices without reward models, no rollout devices with `rollout.engine: hf` (it generates
    with the actor's own model)."""
    algo = cfg.algorithm.name
    roles = {ACTOR}
    if uses_reference(cfg):
        roles.add(REFERENCE)
    if algo.needs_teacher:
        roles.add(TEACHER)
    if algo.needs_critic:
        roles.add(CRITIC)
    if algo.is_online and cfg.models.reward_models:
        roles.add(REWARD)
    if algo.is_online and cfg.rollout.engine is RolloutEngine.VLLM:
        roles.add(ROLLOUT)
    return tuple(r for r in ROLE_ORDER if r in roles)
