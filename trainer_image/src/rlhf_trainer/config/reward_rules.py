"""Rules of the reward sources: which algorithms need one, and how a remote reward is
reached. Pure; `rules.job_problems` runs them with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Problem

if TYPE_CHECKING:
    from .job import JobConfig


def reward_source_problems(cfg: JobConfig) -> list[Problem]:
    algo = cfg.algorithm.name
    if algo.is_online and not cfg.models.has_reward_source:
        return [
            Problem(
                "models",
                f"algorithm {algo.value} needs a reward source: set rewardModels, "
                "rewardFunction or remoteReward",
            )
        ]
    if not algo.is_online and cfg.models.has_reward_source:
        return [
            Problem(
                "models",
                f"reward sources are used by online algorithms only; algorithm {algo.value} "
                "trains on a fixed data set: remove rewardModels/rewardFunction/remoteReward",
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
