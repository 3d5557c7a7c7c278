"""Rules of the reward sources: which algorithms need one, and how a remote reward is
reached. Pure; `rules.job_problems` runs them with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Problem
from .graders import score_model_names

if TYPE_CHECKING:
    from .job import JobConfig


def reward_source_problems(cfg: JobConfig) -> list[Problem]:
    algo, m = cfg.algorithm.name, cfg.models
    if algo.needs_reward_source and not m.has_reward_source:
        return [
            Problem(
                "models",
                f"algorithm {algo.value} needs a reward source: set rewardModels, "
                "rewardFunction, remoteReward or graderReward",
            )
        ]
    if algo.is_online and not algo.needs_reward_source:
        # On-policy distillation: the teacher's per-token log-probs are the whole reward.
        sources = {
            "rewardModels": bool(m.reward_models),
            "rewardFunction": m.reward_function is not None,
            "remoteReward": m.remote_reward is not None,
            "graderReward": m.grader_reward is not None,
        }
        return [
            Problem(
                f"models.{name}",
                f"algorithm {algo.value} is rewarded by the teacher alone (per token, "
                "-(logp_student - logp_teacher)); it uses no reward source: remove it",
            )
            for name, present in sources.items()
            if present
        ]
    if not algo.is_online and m.has_reward_source:
        return [
            Problem(
                "models",
                f"reward sources are used by online algorithms only; algorithm {algo.value} "
                "trains on a fixed data set: remove rewardModels/rewardFunction/remoteReward/"
                "graderReward",
            )
        ]
    return []


def remote_reward_problems(cfg: JobConfig) -> list[Problem]:
    remote = cfg.models.remote_reward
    if remote is None or not remote.url.startswith("http://") or remote.allow_insecure_http:
        return []
    return [
        Problem(
            "models.remoteReward.url",
            "http:// sends the prompts and responses unencrypted: use https://, or set "
            "models.remoteReward.allowInsecureHttp: true for a service on a trusted network",
        )
    ]


def grader_problems(cfg: JobConfig) -> list[Problem]:
    """A score_model grader names a reward model the platform configured (the gateway's
    scoreModels, which it turns into `rewardModels` with `scoreRange`); a job spec has no such
    list, so inside graderReward it is refused, naming the field and what to write instead."""
    reward = cfg.models.grader_reward
    if reward is None:
        return []
    return [
        Problem(
            f"models.graderReward.grader.{path}",
            f"{model!r}: a job spec has no score models to name; put the reward model in "
            "models.rewardModels (scoreRange: [low, high] gives a score_model's range)",
        )
        for path, model in score_model_names(reward.grader)
    ]
