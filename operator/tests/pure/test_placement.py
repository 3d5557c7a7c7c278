"""Placement plans: the OpenRLHF paper's layouts, colocation, packing, impossible layouts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from rlhf_operator.builders.allocation import PlacementError, plan

from .factories import make_spec, spec_dict


@dataclass(frozen=True)
class Layout:
    id: str
    placement: dict[str, Any]
    rollout: dict[str, Any]
    gpus_per_role: dict[str, int]
    total: int
    # (name, replicas, gpus per pod)
    pods: list[tuple[str, int, int]]
    algorithm: str = "ppo"
    extra: dict[str, Any] = field(default_factory=dict)


def _roles(actor: int, critic: int, ref: int, reward: int, **more: Any) -> dict[str, Any]:
    return {
        "actorGpus": actor,
        "criticGpus": critic,
        "referenceGpus": ref,
        "rewardGpus": reward,
        **more,
    }


# OpenRLHF (Hu et al., 2024), Table 2 / section 4: GPUs for actor / critic / reference / reward
# and vLLM engines x tensor parallel, on 8-GPU nodes.
PAPER_LAYOUTS = [
    Layout(
        "7B-16gpu-4/4/2/2-vllm4x1",
        _roles(4, 4, 2, 2),
        {"numEngines": 4, "tensorParallelSize": 1},
        {"actor": 4, "reference": 2, "critic": 4, "reward": 2, "rollout": 4},
        16,
        [("gpu8", 2, 8)],
    ),
    Layout(
        "13B-32gpu-8/8/4/4-vllm8x1",
        _roles(8, 8, 4, 4),
        {"numEngines": 8, "tensorParallelSize": 1},
        {"actor": 8, "reference": 4, "critic": 8, "reward": 4, "rollout": 8},
        32,
        [("gpu8", 4, 8)],
    ),
    Layout(
        "34B-32gpu-8/8/4/4-vllm4x2",
        _roles(8, 8, 4, 4),
        {"numEngines": 4, "tensorParallelSize": 2},
        {"actor": 8, "reference": 4, "critic": 8, "reward": 4, "rollout": 8},
        32,
        [("gpu8", 4, 8)],
    ),
    Layout(
        "70B-32gpu-4/4/4/4-vllm4x4",
        _roles(4, 4, 4, 4),
        {"numEngines": 4, "tensorParallelSize": 4},
        {"actor": 4, "reference": 4, "critic": 4, "reward": 4, "rollout": 16},
        32,
        [("gpu8", 4, 8)],
    ),
    Layout(
        "70B-16gpu-colocated-actor+ref-critic+reward-vllm4x2",
        _roles(4, 4, 4, 4, colocateActorReference=True, colocateCriticReward=True),
        {"numEngines": 4, "tensorParallelSize": 2},
        {"actor+reference": 4, "critic+reward": 4, "rollout": 8},
        16,
        [("gpu8", 2, 8)],
    ),
]

OTHER_LAYOUTS = [
    Layout(
        "hybrid-engine-8gpu-grpo-vllm4x2",
        {"actorGpus": 8, "referenceGpus": 8, "colocateAll": True},
        {"numEngines": 4, "tensorParallelSize": 2, "samplesPerPrompt": 8},
        {"actor+reference+rollout": 8},
        8,
        [("gpu8", 1, 8)],
        algorithm="grpo",
        extra={"models": {"rewardModels": None, "rewardFunction": {"builtin": "repeat-letter"}}},
    ),
    Layout(
        "remainder-pod-gets-its-own-shape-20gpu",
        _roles(8, 4, 2, 2),
        {"numEngines": 4, "tensorParallelSize": 1},
        {"actor": 8, "reference": 2, "critic": 4, "reward": 2, "rollout": 4},
        20,
        [("gpu8", 2, 8), ("gpu4", 1, 4)],
    ),
    Layout(
        "tp3-does-not-divide-node-packs-ranks-into-gaps",
        _roles(2, 1, 1, 1, gpusPerNode=8),
        {"numEngines": 4, "tensorParallelSize": 3},
        {"actor": 2, "reference": 1, "critic": 1, "reward": 1, "rollout": 12},
        17,
        [("gpu8", 2, 8), ("gpu1", 1, 1)],
    ),
    Layout(
        "sft-actor-only",
        {"actorGpus": 4},
        {},
        {"actor": 4},
        4,
        [("gpu4", 1, 4)],
        algorithm="sft",
        extra={"models": {"rewardModels": None}},
    ),
    Layout(
        "dpo-actor-and-reference-colocated",
        {"actorGpus": 2, "referenceGpus": 2, "colocateActorReference": True},
        {},
        {"actor+reference": 2},
        2,
        [("gpu2", 1, 2)],
        algorithm="dpo",
        extra={"models": {"rewardModels": None}},
    ),
    Layout(
        "cpu-device-ranks-per-pod",
        {"device": "cpu", "actorGpus": 2, "referenceGpus": 1, "gpusPerNode": 2},
        {"numEngines": 1, "samplesPerPrompt": 4},
        {"actor": 2, "reference": 1, "rollout": 1},
        4,
        [("cpu2", 2, 2)],
        algorithm="grpo",
        extra={"models": {"rewardModels": None, "rewardFunction": {"builtin": "repeat-letter"}}},
    ),
]


def _spec_for(layout: Layout) -> Any:
    return make_spec(
        algorithm={"name": layout.algorithm},
        placement=layout.placement,
        rollout=layout.rollout,
        **layout.extra,
    )


@pytest.mark.parametrize("layout", PAPER_LAYOUTS + OTHER_LAYOUTS, ids=lambda x: x.id)
def test_layouts(layout: Layout) -> None:
    allocation = plan(_spec_for(layout))
    assert allocation.gpus_per_role == layout.gpus_per_role
    assert allocation.total_gpus == layout.total
    assert [(g.name, g.replicas, g.gpus_per_pod) for g in allocation.worker_groups] == layout.pods
    # Every device is in exactly one pod.
    assert sum(g.replicas * g.gpus_per_pod for g in allocation.worker_groups) == layout.total


@pytest.mark.parametrize("layout", PAPER_LAYOUTS, ids=lambda x: x.id)
def test_paper_layouts_report_engines_and_tp(layout: Layout) -> None:
    allocation = plan(_spec_for(layout))
    assert allocation.rollout_engines == layout.rollout["numEngines"]
    assert allocation.tensor_parallel_size == layout.rollout["tensorParallelSize"]
    assert allocation.device == "gpu"


def test_worker_groups_list_the_roles_they_host() -> None:
    allocation = plan(_spec_for(PAPER_LAYOUTS[4]))
    assert allocation.worker_groups[0].roles == [
        "actor",
        "reference",
        "critic",
        "reward",
        "rollout",
    ]


def test_offline_algorithms_have_no_engines() -> None:
    allocation = plan(_spec_for(OTHER_LAYOUTS[3]))
    assert (allocation.rollout_engines, allocation.tensor_parallel_size) == (0, 1)


# Impossible layouts: the config's own rules reject some (they run first, in the same
# validation the operator does); placement rejects the rest. Each names the field to change.
IMPOSSIBLE_BY_CONFIG = [
    (
        "tp-larger-than-node",
        {"placement": {"gpusPerNode": 4}, "rollout": {"numEngines": 1, "tensorParallelSize": 8}},
        "rollout.tensorParallelSize",
    ),
    (
        "hybrid-engine-gpus-differ-from-actor",
        {
            "placement": {
                "actorGpus": 8,
                "criticGpus": 8,
                "referenceGpus": 8,
                "rewardGpus": 8,
                "colocateAll": True,
            },
            "rollout": {"numEngines": 2, "tensorParallelSize": 2},
        },
        "placement.colocateAll",
    ),
    (
        "colocated-actor-reference-counts-differ",
        {"placement": {"actorGpus": 4, "referenceGpus": 2, "colocateActorReference": True}},
        "placement.colocateActorReference",
    ),
]


@pytest.mark.parametrize(
    ("sections", "field"),
    [c[1:] for c in IMPOSSIBLE_BY_CONFIG],
    ids=[c[0] for c in IMPOSSIBLE_BY_CONFIG],
)
def test_impossible_layouts_rejected_by_config_rules(sections: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        make_spec(**sections)


def test_tp_larger_than_a_pod_is_a_placement_error() -> None:
    # CPU pods too must hold a whole engine (plan() also sees specs built without the rules).
    valid = make_spec(placement={"device": "cpu", "gpusPerNode": 1})
    spec = valid.model_copy(
        update={"rollout": valid.rollout.model_copy(update={"tensor_parallel_size": 2})}
    )
    with pytest.raises(PlacementError) as err:
        plan(spec)
    assert err.value.field == "spec.rollout.tensorParallelSize"
    assert "placement.gpusPerNode (1)" in str(err.value)


def test_tensor_parallel_engines_are_planned_engine_by_engine() -> None:
    allocation = plan(make_spec(rollout={"numEngines": 2, "tensorParallelSize": 4}))
    assert (allocation.rollout_engines, allocation.tensor_parallel_size) == (2, 4)
    assert allocation.gpus_per_role["rollout"] == 8


def test_placement_checks_colocation_itself() -> None:
    # plan() is also called on specs built without the config rules (model_construct).
    valid = make_spec()
    broken = valid.model_copy(
        update={
            "placement": valid.placement.model_copy(
                update={"actor_gpus": 4, "reference_gpus": 2, "colocate_actor_reference": True}
            )
        }
    )
    with pytest.raises(PlacementError, match=r"spec\.placement\.colocateActorReference"):
        plan(broken)
    hybrid = valid.model_copy(
        update={
            "placement": valid.placement.model_copy(update={"colocate_all": True, "actor_gpus": 2})
        }
    )
    with pytest.raises(PlacementError, match=r"spec\.placement\.colocateAll: .*actor=2"):
        plan(hybrid)


def test_base_spec_is_valid() -> None:
    assert make_spec().placement.actor_gpus == 1
    assert spec_dict()["algorithm"] == {"name": "ppo"}
