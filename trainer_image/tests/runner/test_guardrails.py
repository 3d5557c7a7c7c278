"""Training-health guardrails (`runPolicy.guardrails`): which step trips which guard, and the
message the trainer, the condition and the Event share (pure; the driver raises `Unhealthy`
with it, the runner classes it `Unhealthy` and `rlhf run` prints it)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from rlhf_trainer.config import FailureClass, JobConfig
from rlhf_trainer.config.guardrails import Guard, GuardrailAction, Guardrails, tripped_guard
from rlhf_trainer.config.outcome import ExitCode
from rlhf_trainer.context.health import HealthWatch, Unhealthy
from rlhf_trainer.context.job import RunFailed
from rlhf_trainer.runner.main import failure_message
from rlhf_trainer.runner.outcome import classify, exit_code

HEALTHY = {"kl": 0.05, "response_length": 12.0, "truncated": 0.1, "reward": 0.4}


def first_trip(cfg: dict[str, Any], steps: list[dict[str, float]]) -> tuple[int, Any] | None:
    watch = HealthWatch(Guardrails.model_validate(cfg))
    for step, metrics in enumerate(steps, start=1):
        trip = watch.check(step, {**HEALTHY, **metrics})
        if trip is not None:
            return step, trip
    return None


@pytest.mark.parametrize(
    ("cfg", "steps", "guard", "at"),
    [
        pytest.param({}, [{}] * 20, None, None, id="healthy-run-with-defaults"),
        pytest.param({}, [{}, {"policy_loss": math.nan}], Guard.NON_FINITE, 2, id="nan-loss"),
        pytest.param({}, [{"kl": math.inf}], Guard.NON_FINITE, 1, id="inf-kl"),
        pytest.param({"nonFinite": False}, [{"policy_loss": math.nan}], None, None, id="nan-off"),
        pytest.param({}, [{"kl": 9.0}, {"kl": 11.0}], Guard.KL, 2, id="kl-default-bound"),
        pytest.param({"maxKl": 0.01}, [{"kl": 0.02}], Guard.KL, 1, id="kl-bound-lowered"),
        pytest.param({"maxKl": None}, [{"kl": 50.0}], None, None, id="kl-off"),
        pytest.param({}, [{"response_length": 0.5}], Guard.SHORT_RESPONSES, 1, id="empty"),
        pytest.param(
            {"maxTruncatedFraction": 0.9, "patience": 3},
            [{"truncated": 1.0}, {"truncated": 1.0}, {"truncated": 0.5}, *[{"truncated": 1.0}] * 3],
            Guard.LONG_RESPONSES,
            6,
            id="running-to-the-cap-for-patience-steps",
        ),
        pytest.param({}, [{"truncated": 1.0}] * 10, None, None, id="truncation-off-by-default"),
        pytest.param(
            {"minEntropy": 0.1, "patience": 2},
            [{"entropy": 0.05}, {"entropy": 0.2}, {"entropy": 0.05}, {"entropy": 0.01}],
            Guard.ENTROPY,
            4,
            id="entropy-collapse",
        ),
        pytest.param({"enabled": False}, [{"kl": math.nan}], None, None, id="all-off"),
    ],
)
def test_guards(
    cfg: dict[str, Any], steps: list[dict[str, float]], guard: Guard | None, at: int | None
) -> None:
    found = first_trip(cfg, steps)
    got = (found[1].guard, found[0]) if found else (None, None)
    assert got == (guard, at)


def evals(pairs: list[tuple[float, float]]) -> list[dict[str, float]]:
    """Two steps per evaluation: a train step, then one with the evaluation."""
    out: list[dict[str, float]] = []
    for train, evaluated in pairs:
        out += [{"reward": train}, {"reward": train, "eval/mean_reward": evaluated}]
    return out


def test_train_reward_up_while_eval_falls_for_n_evaluations() -> None:
    hacking = [(0.1, 0.5), (0.2, 0.45), (0.3, 0.4), (0.4, 0.35), (0.5, 0.3)]
    found = first_trip({"rewardEvalDivergence": 4}, evals(hacking))
    assert found is not None and found[0] == 10
    assert found[1].guard is Guard.REWARD_EVAL_DIVERGENCE
    assert "train reward rose [0.1, 0.2, 0.3, 0.4, 0.5]" in found[1].message
    assert "eval/mean_reward fell [0.5, 0.45, 0.4, 0.35, 0.3]" in found[1].message
    # One evaluation that does not fall breaks the run of evaluations.
    broken = [(0.1, 0.5), (0.2, 0.45), (0.3, 0.46), (0.4, 0.35), (0.5, 0.3)]
    assert first_trip({"rewardEvalDivergence": 4}, evals(broken)) is None
    assert first_trip({"rewardEvalDivergence": None}, evals(hacking)) is None


def test_the_message_quotes_metric_values_threshold_and_the_field() -> None:
    found = first_trip({"maxKl": 0.5}, [{"kl": 0.75}])
    assert found is not None
    trip = found[1]
    assert trip.action is GuardrailAction.SUSPEND
    assert trip.message == (
        "guardrail runPolicy.guardrails.maxKl tripped at step 1: kl (mean per-token KL to the "
        "reference) is 0.75 > 0.5; suspending the job after checkpointing the last consistent "
        "step (raise or turn off runPolicy.guardrails.maxKl to go on)"
    )
    assert tripped_guard(trip.message) is Guard.KL  # how the operator reads the outcome
    fail = first_trip({"maxKl": 0.5, "action": "fail"}, [{"kl": 0.75}])
    assert fail is not None and "failing the job" in fail[1].message


def test_a_trip_ends_the_run_as_unhealthy_with_its_message() -> None:
    found = first_trip({"maxKl": 0.5}, [{"kl": 0.75}])
    assert found is not None
    err = RunFailed(Unhealthy(found[1]), 1, None, None)
    assert classify(err) is FailureClass.UNHEALTHY
    assert exit_code(err) == ExitCode.UNHEALTHY == 65
    assert not FailureClass.UNHEALTHY.retryable
    assert failure_message(err).startswith(found[1].message)
    # The step's checkpoint was the regular one (or the weights were not finite): the latest.
    latest = RunFailed(Unhealthy(found[1]), 1, None, Path("/ckpt/step-1"))
    assert failure_message(latest) == f"{found[1].message}; last checkpoint: /ckpt/step-1"


def test_offline_trainers_watch_only_non_finite_values() -> None:
    watch = HealthWatch.offline(Guardrails())
    assert watch.check(1, {"loss": 1.0, "kl": 50.0, "response_length": 0.0}) is None
    trip = watch.check(2, {"loss": math.nan})
    assert trip is not None and trip.guard is Guard.NON_FINITE


def test_guardrails_are_on_by_default_and_reach_the_trainer_config() -> None:
    cfg = JobConfig.model_validate(
        {
            "algorithm": {"name": "sft"},
            "models": {"actor": {"randomInit": {}}},
            "data": {"train": [{"builtin": "repeat-letter"}]},
            "runPolicy": {"guardrails": {"maxKl": 2.5}},
        }
    )
    g = cfg.run_policy.guardrails
    assert (g.enabled, g.action, g.non_finite, g.max_kl) == (True, "suspend", True, 2.5)
