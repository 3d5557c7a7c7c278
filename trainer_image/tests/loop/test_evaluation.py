"""Evaluation during training: the unbiased pass@k estimator, the eval metrics, when a step
evaluates, and what is generated and scored (pure, with a scripted source)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch
from torch import Tensor

from rlhf_trainer.config import JobConfig
from rlhf_trainer.loop.batch import Sample
from rlhf_trainer.loop.evaluation import (
    eval_metrics,
    evaluate,
    is_eval_step,
    ks_for,
    pass_at_k,
)


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of the k-subsets of n responses (c passing) holding a passing one."""
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(
    ("n", "c", "k"), [(n, c, k) for n in (1, 4, 7) for c in range(n + 1) for k in range(1, n + 1)]
)
def test_pass_at_k_is_the_probability_over_k_subsets(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        pytest.param(10, 3, 1, 0.3, id="pass@1-is-the-pass-rate"),
        pytest.param(10, 0, 5, 0.0, id="none-pass"),
        pytest.param(10, 6, 5, 1.0, id="too-few-failures-to-fill-k"),
        pytest.param(2, 1, 2, 1.0, id="k-equals-n"),
        pytest.param(200, 1, 100, 0.5, id="large-n-one-pass"),
    ],
)
def test_pass_at_k_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_stays_finite_for_large_n() -> None:
    # C(1024, 512) overflows a float; the product form does not.
    value = pass_at_k(1024, 3, 512)
    assert math.isfinite(value) and value == pytest.approx(
        1 - (512 * 511 * 510) / (1024 * 1023 * 1022)
    )


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, 1, 0), (4, 1, 5), (4, -1, 1)])
def test_pass_at_k_refuses_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(
    ("n", "ks"), [(1, [1]), (2, [1, 2]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8])]
)
def test_ks_are_powers_of_two_and_n(n: int, ks: list[int]) -> None:
    assert ks_for(n) == ks


def test_eval_metrics() -> None:
    metrics = eval_metrics([1.0, 0.5], [[1.0, 0.0, 0.0, 0.0], [0.5, 1.0, 1.0, 0.9]], 1.0)
    assert metrics == {
        "eval/greedy_reward": 0.75,
        "eval/mean_reward": pytest.approx(4.4 / 8),
        "eval/prompts": 2.0,
        "eval/samples": 4.0,
        "eval/pass@1": pytest.approx((0.25 + 0.5) / 2),
        "eval/pass@2": pytest.approx((0.5 + 5 / 6) / 2),
        "eval/pass@4": 1.0,
    }


def test_the_pass_threshold_is_inclusive() -> None:
    assert eval_metrics([0.7], [[0.7, 0.69]], 0.7)["eval/pass@1"] == 0.5


def test_eval_metrics_need_one_row_per_prompt() -> None:
    with pytest.raises(ValueError, match="1 greedy rewards for 2 prompts"):
        eval_metrics([1.0], [[1.0], [0.0]], 1.0)
    with pytest.raises(ValueError, match="same number"):
        eval_metrics([1.0, 1.0], [[1.0], [0.0, 1.0]], 1.0)


def job(eval_every: int | None = 2, with_eval: bool = True, **training: Any) -> JobConfig:
    doc: dict[str, Any] = {
        "algorithm": {"name": "grpo"},
        "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
        "data": {"train": [{"builtin": "repeat-letter"}]},
        "rollout": {"samplesPerPrompt": 2, "maxNewTokens": 4, "temperature": 0.7, "topP": 0.9},
        "training": {"rolloutBatchSize": 2, "trainBatchSize": 4, "microTrainBatchSize": 2},
    }
    if with_eval:
        doc["data"]["eval"] = [{"builtin": "repeat-letter", "split": "test"}]
        doc["training"] |= {"evalEverySteps": eval_every, **training}
    return JobConfig.model_validate(doc)


@pytest.mark.parametrize(
    ("cfg", "steps"),
    [
        pytest.param(job(2), [2, 4, 5], id="every-2-and-the-last"),
        pytest.param(job(None), [5], id="only-the-last"),
        pytest.param(job(with_eval=False), [], id="no-eval-data"),
    ],
)
def test_which_steps_evaluate(cfg: JobConfig, steps: list[int]) -> None:
    assert [s for s in range(1, 6) if is_eval_step(cfg, s, total_steps=5)] == steps


class Source:
    """Answers with `reward` ids: a response of token r scores r / 10."""

    def __init__(self, cfg: JobConfig) -> None:
        self.cfg = cfg
        self.calls: list[tuple[int, float, float, str]] = []
        self.scored: list[int] = []

    def generate(
        self, step: int, items: list[Any], *, cfg: JobConfig | None = None, stream: str = ""
    ) -> list[Sample]:
        assert cfg is not None
        r = cfg.rollout
        self.calls.append((r.samples_per_prompt, r.temperature, r.top_p, stream))
        greedy = r.temperature == 0
        return [
            Sample(p, [p], [10 if greedy else (p + k) % 11], [1], "stop")
            for p in items
            for k in range(r.samples_per_prompt)
        ]

    def score(self, samples: list[Sample]) -> tuple[Tensor, dict[str, float]]:
        self.scored.append(len(samples))
        return torch.tensor([s.response_ids[0] / 10 for s in samples]), {}


def test_evaluate_generates_greedy_and_n_samples_and_scores_them_once() -> None:
    source = Source(job(evalSamples=3))
    metrics = evaluate(source, step=4, prompts=[8, 9])
    # Greedy at temperature 0; the n samples at the rollout's temperature and top-p.
    assert source.calls == [(1, 0.0, 0.9, "eval"), (3, 0.7, 0.9, "eval")]
    assert source.scored == [2 + 6]
    # Prompt 8 -> tokens 8, 9, 10 (one passes); prompt 9 -> 9, 10, 0 (one passes).
    assert metrics["eval/greedy_reward"] == 1.0
    assert metrics["eval/mean_reward"] == pytest.approx((0.8 + 0.9 + 1 + 0.9 + 1 + 0) / 6)
    assert metrics["eval/pass@1"] == pytest.approx(1 / 3)
    assert metrics["eval/pass@3"] == 1.0
    assert source.cfg.rollout.samples_per_prompt == 2  # the job's own config is untouched


def test_eval_samples_default_to_samples_per_prompt() -> None:
    source = Source(job())
    metrics = evaluate(source, step=2, prompts=[1])
    assert source.calls[1][0] == 2 and metrics["eval/samples"] == 2.0
