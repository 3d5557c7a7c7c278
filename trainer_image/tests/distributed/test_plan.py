"""Placement plans for OpenRLHF's colocation options (pure: no Ray)."""

from __future__ import annotations

from typing import Any

import pytest

from rlhf_trainer.config import JobConfig
from rlhf_trainer.distributed.plan import plan_placement


def job(algorithm: str = "ppo", placement: dict[str, Any] | None = None, **extra: Any) -> JobConfig:
    doc: dict[str, Any] = {
        "algorithm": {"name": algorithm},
        "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
        "data": {"train": [{"builtin": "repeat-letter"}]},
        "rollout": {"samplesPerPrompt": 4},
        "training": {"rolloutBatchSize": 8, "trainBatchSize": 8, "microTrainBatchSize": 2},
        "placement": {"device": "cpu", "rayResource": "GPU-like", **(placement or {})},
    }
    for key, value in extra.items():
        doc[key] = {**doc.get(key, {}), **value}
    return JobConfig.model_validate(doc)


def layout(cfg: JobConfig) -> dict[str, tuple[int, tuple[tuple[str, int, float], ...]]]:
    plan = plan_placement(cfg)
    return {
        g.name: (g.devices, tuple((s.role, s.ranks, s.fraction) for s in g.shares))
        for g in plan.groups
    }


CASES = [
    pytest.param(
        job(),
        {
            "actor": (1, (("actor", 1, 1.0),)),
            "reference": (1, (("reference", 1, 1.0),)),
            "critic": (1, (("critic", 1, 1.0),)),
            "rollout": (1, (("rollout", 1, 1.0),)),
        },
        id="ppo-separate",
    ),
    pytest.param(
        job("grpo", {"colocateActorReference": True, "actorGpus": 2, "referenceGpus": 2}),
        {
            "actor+reference": (2, (("actor", 2, 0.5), ("reference", 2, 0.5))),
            "rollout": (1, (("rollout", 1, 1.0),)),
        },
        id="grpo-actor-reference-colocated-no-critic",
    ),
    pytest.param(
        job(
            "ppo",
            {"colocateCriticReward": True},
            models={"rewardModels": [{"randomInit": {}}, {"randomInit": {}}]},
        ),
        {
            "actor": (1, (("actor", 1, 1.0),)),
            "reference": (1, (("reference", 1, 1.0),)),
            "critic+reward": (
                1,
                (("critic", 1, 0.3333), ("reward0", 1, 0.3333), ("reward1", 1, 0.3333)),
            ),
            "rollout": (1, (("rollout", 1, 1.0),)),
        },
        id="ppo-critic-and-two-reward-models-colocated",
    ),
    pytest.param(
        job(
            "ppo",
            {"colocateAll": True, "actorGpus": 2, "referenceGpus": 2, "criticGpus": 2},
            rollout={"numEngines": 2},
        ),
        {
            "actor+reference+critic+rollout": (
                2,
                (
                    ("actor", 2, 0.25),
                    ("reference", 2, 0.25),
                    ("critic", 2, 0.25),
                    ("rollout", 2, 0.25),
                ),
            )
        },
        id="hybrid-engine",
    ),
    pytest.param(
        job("rloo", rollout={"engine": "hf"}),
        {"actor": (1, (("actor", 1, 1.0),)), "reference": (1, (("reference", 1, 1.0),))},
        id="hf-engine-places-no-rollout",
    ),
    pytest.param(
        job("ppo", models={"rewardModels": [{"randomInit": {}}, {"randomInit": {}}]}),
        {
            "actor": (1, (("actor", 1, 1.0),)),
            "reference": (1, (("reference", 1, 1.0),)),
            "critic": (1, (("critic", 1, 1.0),)),
            # Several reward models share the reward devices (placement.rewardGpus).
            "reward": (1, (("reward0", 1, 0.5), ("reward1", 1, 0.5))),
            "rollout": (1, (("rollout", 1, 1.0),)),
        },
        id="ppo-two-reward-models-share-the-reward-devices",
    ),
]


@pytest.mark.parametrize(("cfg", "expected"), CASES)
def test_plan_layouts(cfg: JobConfig, expected: dict[str, object]) -> None:
    assert layout(cfg) == expected


def test_fractions_on_a_bundle_never_exceed_one() -> None:
    cfg = job(
        "ppo",
        {"colocateAll": True},
        models={"rewardModels": [{"randomInit": {}}] * 3},
    )
    (group,) = plan_placement(cfg).groups
    assert sum(s.fraction for s in group.shares) <= 1.0


def test_total_devices_and_resource_name() -> None:
    plan = plan_placement(job("ppo", {"actorGpus": 2, "referenceGpus": 1}))
    assert plan.resource == "GPU-like"
    assert plan.total_devices == 2 + 1 + 1 + 1


def slots(cfg: JobConfig) -> dict[str, tuple[int, str, dict[str, list[tuple[int, int]]]]]:
    """Per device group: bundles per placement group, its strategy, and each role's
    (placement group, bundle) per rank."""
    plan = plan_placement(cfg)
    return {
        g.name: (g.bundles_per_set, g.strategy, {s.role: g.slots(s) for s in g.shares})
        for g in plan.groups
    }


def test_tensor_parallel_engines_get_a_placement_group_each_on_one_node() -> None:
    cfg = job("grpo", rollout={"numEngines": 2, "tensorParallelSize": 2})
    assert slots(cfg) == {
        "actor": (1, "PACK", {"actor": [(0, 0)]}),
        "reference": (1, "PACK", {"reference": [(0, 0)]}),
        # The engine actor on its unit's first bundle; its second rank's worker on the other.
        "rollout": (2, "STRICT_PACK", {"rollout": [(0, 0), (1, 0)]}),
    }


def test_hybrid_engine_with_tensor_parallel_engines_spreads_model_ranks_over_the_units() -> None:
    cfg = job(
        "grpo",
        {"colocateAll": True, "actorGpus": 4, "referenceGpus": 4},
        rollout={"numEngines": 2, "tensorParallelSize": 2},
        training={"rolloutBatchSize": 8, "trainBatchSize": 8, "microTrainBatchSize": 1},
    )
    assert slots(cfg) == {
        "actor+reference+rollout": (
            2,
            "STRICT_PACK",
            {
                "actor": [(0, 0), (0, 1), (1, 0), (1, 1)],
                "reference": [(0, 0), (0, 1), (1, 0), (1, 1)],
                "rollout": [(0, 0), (1, 0)],
            },
        )
    }
    assert plan_placement(cfg).describe() == (
        "actor+reference+rollout: 4 x GPU-like in 2 sets of 2 "
        "(actor 4x0.3333, reference 4x0.3333, rollout 2x0.3333 tp 2)"
    )


@pytest.mark.parametrize(
    ("random_init", "refused"),
    [
        ({}, []),
        ({"numHeads": 1, "hiddenSize": 64}, ["numHeads"]),
        ({"intermediateSize": 129}, ["intermediateSize"]),
    ],
    ids=["even", "one-head", "odd-mlp"],
)
def test_tensor_parallel_size_must_divide_a_random_init_actor(
    random_init: dict[str, int], refused: list[str]
) -> None:
    doc = {"rollout": {"tensorParallelSize": 2}, "models": {"actor": {"randomInit": random_init}}}
    if not refused:
        job(**doc)
        return
    with pytest.raises(ValueError) as err:
        job(**doc)
    for name in refused:
        assert f"must divide models.actor.randomInit.{name}" in str(err.value)


def test_no_reference_rank_without_a_kl_term() -> None:
    cfg = job("grpo")
    cfg = cfg.model_copy(update={"algorithm": cfg.algorithm.model_copy(update={"kl_coef": 0.0})})
    plan = plan_placement(cfg)
    assert "reference" not in plan.roles()
