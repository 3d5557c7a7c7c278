"""The job's reward sources, built from `spec.models`, scored and combined with their weights.

Reward *models* run on Ray actors (`rlhf_trainer.distributed`); the driver passes their `[B]`
scores in. The reward function (a file in a worker process, or a builtin) and the remote
service are called here, concurrently, and everything is summed with its weight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from torch import Tensor

from rlhf_trainer.config import ModelsConfig, RewardErrorPolicy, RewardFunction

from .builtin import BuiltinRewardFunction
from .function_runner import RewardFunctionLoadError, RewardFunctionRunner
from .grader import GraderRewardSource
from .on_error import ZeroOnError
from .output import RewardResult, combine_rewards, to_score_range
from .remote import RemoteRewardClient

# Where the operator mounts a rewardFunction.configMapRef on the cluster (it also rewrites the
# reference into a `path` there); see rlhf_operator.builders.common.REWARD_FUNCTION_DIR.
REWARD_FUNCTION_MOUNT = Path("/etc/rlhf-reward")


class RewardFn(Protocol):
    @property
    def name(self) -> str: ...

    def __call__(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str | None]
    ) -> RewardResult: ...

    def close(self) -> None: ...


def build_reward_function(
    cfg: RewardFunction, base_dir: Path, *, mount_dir: Path = REWARD_FUNCTION_MOUNT
) -> RewardFn:
    """A builtin, or a file run in a worker process (relative paths: the job file's dir)."""
    if cfg.builtin is not None:
        return BuiltinRewardFunction(cfg.builtin)
    if cfg.path is not None:
        path = Path(cfg.path).expanduser()
        file = path if path.is_absolute() else base_dir / path
    else:
        ref = cfg.config_map_ref
        if ref is None:  # unreachable for a validated RewardFunction
            raise ValueError("rewardFunction needs path, configMapRef or builtin")
        file = mount_dir / ref.key
        if not file.is_file():
            raise RewardFunctionLoadError(
                f"models.rewardFunction.configMapRef ({ref.name}/{ref.key}) is mounted by the "
                f"operator at {file} on a cluster, and it is not there; to run locally, use "
                "rewardFunction.path instead"
            )
    runner = RewardFunctionRunner(file, cfg.timeout_seconds, limits=cfg.limits)
    return ZeroOnError(runner) if cfg.on_error is RewardErrorPolicy.ZERO else runner


class RewardSources:
    """All reward sources of a job; `score` returns the weighted sum and per-source metrics."""

    def __init__(self, models: ModelsConfig, base_dir: Path) -> None:
        self.model_weights = [m.weight for m in models.reward_models]
        self.model_ranges = [m.score_range for m in models.reward_models]
        self.function: RewardFn | None = None
        self.function_weight = 1.0
        self.remote: RemoteRewardClient | None = None
        self.remote_weight = 1.0
        self.grader: GraderRewardSource | None = None
        self.grader_weight = 1.0
        if models.grader_reward is not None:
            self.grader = GraderRewardSource(models.grader_reward)
            self.grader_weight = models.grader_reward.weight
        if models.reward_function is not None:
            self.function = build_reward_function(models.reward_function, base_dir)
            self.function_weight = models.reward_function.weight
        if models.remote_reward is not None:
            self.remote = RemoteRewardClient.from_config(models.remote_reward)
            self.remote_weight = models.remote_reward.weight
        self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="reward")

    def start(self) -> None:
        """Load the reward function file now (in its worker process), so that one which does
        not import fails the job before its cluster starts, not at the first step's scores."""
        if isinstance(self.function, RewardFunctionRunner | ZeroOnError):
            self.function.start()
        if self.grader is not None:
            self.grader.start()

    def score(
        self,
        queries: Sequence[str],
        prompts: Sequence[str],
        labels: Sequence[str | None],
        model_scores: Sequence[Tensor] = (),
        *,
        responses: Sequence[str] | None = None,
        items: Sequence[Mapping[str, Any]] | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """Combined `[B]` rewards, and metrics: each source's mean, the task score, extras.
        A grader grades `responses` (default: the queries) against `items` (the rows)."""
        if len(model_scores) != len(self.model_weights):
            raise ValueError(
                f"got {len(model_scores)} reward-model score tensors for "
                f"{len(self.model_weights)} configured reward models"
            )
        calls = {
            key: self._pool.submit(fn, queries, prompts, labels)
            for key, fn in (("function", self.function), ("remote", self.remote))
            if fn is not None
        }
        if self.grader is not None:
            calls["grader"] = self._pool.submit(
                self.grader,
                list(responses if responses is not None else queries),
                list(items if items is not None else [{} for _ in queries]),
            )
        parts: list[tuple[float, Tensor]] = []
        metrics: dict[str, float] = {}
        for i, (weight, raw) in enumerate(zip(self.model_weights, model_scores, strict=True)):
            scores = to_score_range(raw, self.model_ranges[i])
            parts.append((weight, scores))
            metrics[f"reward/model_{i}"] = float(scores.float().mean())
        weights = {
            "function": self.function_weight,
            "remote": self.remote_weight,
            "grader": self.grader_weight,
        }
        for key, future in calls.items():
            result = future.result()  # re-raises the source's error, which names the source
            parts.append((weights[key], result.rewards))
            metrics[f"reward/{key}"] = float(result.rewards.mean())
            metrics[f"score/{key}"] = float(result.scores.mean())
            metrics |= {f"reward/{key}/{name}": v for name, v in result.extra_logs.items()}
        return combine_rewards(parts), metrics

    def close(self) -> None:
        for fn in (self.function, self.remote, self.grader):
            if fn is not None:
                fn.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
