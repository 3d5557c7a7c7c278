"""`rollout.async`, `maxStaleness` and `partialRollout`: wire names and refusals."""

from __future__ import annotations

from typing import Any

import pytest
from test_config import messages, minimal

from rlhf_trainer.config import JobConfig


def test_async_is_off_by_default_and_named_async_on_the_wire() -> None:
    cfg = JobConfig.model_validate(minimal())
    assert not cfg.rollout.async_rollout and cfg.rollout.max_staleness == 1
    on = JobConfig.model_validate(minimal(rollout={"async": True, "maxStaleness": 2}))
    assert on.rollout.async_rollout and on.rollout.max_staleness == 2
    assert on.to_manifest()["rollout"]["async"] is True


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        pytest.param(
            {"rollout": {"async": True, "engine": "hf"}},
            "rollout.async: overlaps vLLM engines' generation with the actor's update; with "
            "rollout.engine hf the actor's own ranks generate",
            id="hf-engine",
        ),
        pytest.param(
            {
                "rollout": {"async": True, "enableSleep": True},
                "placement": {"colocateAll": True, "device": "gpu"},
            },
            "rollout.async: the engines generate while the actor trains, so they cannot sleep",
            id="sleep-mode",
        ),
        pytest.param(
            {"rollout": {"maxStaleness": 2}},
            "rollout.maxStaleness: bounds async rollout's lag: it needs rollout.async: true",
            id="staleness-without-async",
        ),
        pytest.param(
            {"rollout": {"partialRollout": True}},
            "rollout.partialRollout: pauses generation that runs during training: it needs "
            "rollout.async: true",
            id="partial-without-async",
        ),
        pytest.param(
            {
                "rollout": {"async": True, "partialRollout": True},
                "training": {"deterministic": True},
            },
            "rollout.partialRollout: where a weight update lands in a batch in flight depends "
            "on timing",
            id="partial-deterministic",
        ),
        pytest.param(
            {"rollout": {"async": True, "partialRollout": True, "tensorParallelSize": 2}},
            "rollout.partialRollout: pausable engines (vLLM's AsyncLLM) run one rank per "
            "engine in this trainer; got rollout.tensorParallelSize 2",
            id="partial-tensor-parallel",
        ),
        pytest.param(
            {"rollout": {"async": True, "maxStaleness": 9}},
            "rollout.maxStaleness: Input should be less than or equal to 8",
            id="staleness-bound",
        ),
    ],
)
def test_async_refusals(sections: dict[str, Any], expected: str) -> None:
    found = messages(minimal(**sections))
    assert any(expected in line for line in found), found


def test_async_on_an_offline_algorithm_is_refused() -> None:
    doc = minimal(algorithm={"name": "sft"}, rollout={"async": True})
    doc["models"].pop("rewardFunction")
    assert any("rollout.async: applies to online algorithms" in m for m in messages(doc))


def test_async_on_an_iterative_algorithm_is_refused() -> None:
    doc = minimal(algorithm={"name": "rejection-sampling"}, rollout={"async": True})
    assert any("rollout.async: applies to the policy-gradient" in m for m in messages(doc))


def test_async_ppo_with_vllm_is_valid() -> None:
    assert messages(minimal(rollout={"async": True})) == []


def test_partial_rollout_with_async_is_valid() -> None:
    assert messages(minimal(rollout={"async": True, "partialRollout": True})) == []
