"""Evaluation during training: the policy's greedy and sampled responses to the `data.eval`
prompts, scored by the job's own reward sources.

Every `training.evalEverySteps` steps and after the last one (with `data.eval` set), once the
engines hold the step's weights:

- one greedy response per prompt (temperature 0): `eval/greedy_reward`;
- `training.evalSamples` (n, default `rollout.samplesPerPrompt`) sampled responses per prompt,
  with the rollout's temperature, top-p and top-k: `eval/mean_reward`, and `eval/pass@k` for
  k = 1, 2, 4, ... up to n and n itself, with Chen et al. (2021)'s unbiased estimator. A
  response passes when its reward is >= `training.evalPassThreshold` (default 1.0: the reward
  a verifiable task gives a correct answer).

The sampling seeds are a function of (seed, step), apart from training's, so an evaluation
replays exactly in a resumed run and leaves the training rollouts as they would be without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from torch import Tensor

from rlhf_trainer.config import JobConfig
from rlhf_trainer.config.report import (
    EVAL_GREEDY_REWARD,
    EVAL_MEAN_REWARD,
    EVAL_PASS_AT,
    EVAL_PROMPTS,
    EVAL_SAMPLES,
)

from .batch import Sample

STREAM = "eval"


# --- the pure part ---------------------------------------------------------------------------
def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k responses drawn without replacement from n passes), c of n passing:
    1 - C(n-c, k) / C(n, k) (Chen et al. 2021), as a stable product."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def ks_for(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


def eval_metrics(
    greedy: Sequence[float], sampled: Sequence[Sequence[float]], threshold: float
) -> dict[str, float]:
    """`greedy`: one reward per prompt; `sampled`: n rewards per prompt (same order)."""
    if not greedy or len(greedy) != len(sampled):
        raise ValueError(f"{len(greedy)} greedy rewards for {len(sampled)} prompts")
    n = len(sampled[0])
    if n < 1 or any(len(r) != n for r in sampled):
        raise ValueError("every prompt needs the same number (>= 1) of sampled rewards")
    passing = [sum(r >= threshold for r in rewards) for rewards in sampled]
    metrics = {
        EVAL_GREEDY_REWARD: sum(greedy) / len(greedy),
        EVAL_MEAN_REWARD: sum(map(sum, sampled)) / (n * len(sampled)),
        EVAL_PROMPTS: float(len(greedy)),
        EVAL_SAMPLES: float(n),
    }
    for k in ks_for(n):
        metrics[f"{EVAL_PASS_AT}{k}"] = sum(pass_at_k(n, c, k) for c in passing) / len(passing)
    return metrics


def is_eval_step(cfg: JobConfig, step: int, total_steps: int) -> bool:
    if not cfg.data.eval:
        return False
    every = cfg.training.eval_every_steps
    return step == total_steps or (every is not None and step % every == 0)


def with_sampling(cfg: JobConfig, n: int, temperature: float) -> JobConfig:
    rollout = cfg.rollout.model_copy(update={"samples_per_prompt": n, "temperature": temperature})
    return cfg.model_copy(update={"rollout": rollout})


# --- against the engines ---------------------------------------------------------------------
class EvalSource(Protocol):
    """What evaluation needs of the driver (`loop.driver.Trainer`)."""

    cfg: JobConfig

    def generate(
        self, step: int, items: list[Any], *, cfg: JobConfig | None = None, stream: str = ""
    ) -> list[Sample]: ...

    def score(self, samples: list[Sample]) -> tuple[Tensor, dict[str, float]]: ...


def evaluate(source: EvalSource, step: int, prompts: Sequence[Any]) -> dict[str, float]:
    """Greedy and sampled responses to `prompts` (`PromptItem`s), scored in one call."""
    cfg, items = source.cfg, list(prompts)
    n = cfg.training.eval_samples or cfg.rollout.samples_per_prompt
    greedy = source.generate(step, items, cfg=with_sampling(cfg, 1, 0.0), stream=STREAM)
    sampled = source.generate(
        step, items, cfg=with_sampling(cfg, n, cfg.rollout.temperature), stream=STREAM
    )
    rewards, _ = source.score(greedy + sampled)
    values = rewards.tolist()
    greedy_rewards, rest = values[: len(items)], values[len(items) :]
    per_prompt = [rest[i * n : (i + 1) * n] for i in range(len(items))]
    return eval_metrics(greedy_rewards, per_prompt, cfg.training.eval_pass_threshold)
