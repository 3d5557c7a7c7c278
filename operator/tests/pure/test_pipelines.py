"""`pipelines.decide_pipeline`, table by table: which stage jobs are created, stage states, the
pipeline's phase, suspend, conflicts and invalid specs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rlhf_operator.reconcile.pipelines import StageJob, decide_pipeline

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
UID = "pipeline-uid"


def _stage(name: str, actor: dict[str, Any], algorithm: str = "sft") -> dict[str, Any]:
    return {
        "name": name,
        "spec": {
            "algorithm": {"name": algorithm},
            "models": {"actor": actor},
            "data": {"train": [{"hfId": "org/data"}]},
        },
    }


# a and b from the base, c from both (b's actor is a's model).
STAGES = [
    _stage("a", {"pretrained": "org/base"}),
    _stage("b", {"pretrained": "org/base"}, "reward-model"),
    _stage("c", {"fromStage": "a"}, "dpo"),
]


def _body(stages: list[dict[str, Any]] = STAGES, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFPipeline",
        "metadata": {"name": "p", "namespace": "ns", "uid": UID, "generation": 1},
        "spec": {"stages": stages, **spec},
    }


def _job(name: str, phase: str | None, *, owned: bool = True, suspend: bool = False) -> StageJob:
    output = f"pvc://{name}-checkpoints/{name}/output/final" if phase == "Succeeded" else None
    return StageJob(name, owned, phase, output, "", suspend)


def _states(decision: Any) -> dict[str, str]:
    return {s.name: (s.phase or s.state).value for s in decision.status.stages}


@pytest.mark.parametrize(
    ("jobs", "created", "states", "phase"),
    [
        pytest.param({}, ["p-a", "p-b"], {"a": "Created", "b": "Created", "c": "Waiting"},
                     "Running", id="independent-stages-at-once"),
        pytest.param({"p-a": _job("p-a", "Running"), "p-b": _job("p-b", "Succeeded")}, [],
                     {"a": "Running", "b": "Succeeded", "c": "Waiting"}, "Running",
                     id="waits-for-its-input"),
        pytest.param({"p-a": _job("p-a", "Succeeded"), "p-b": _job("p-b", "Running")}, ["p-c"],
                     {"a": "Succeeded", "b": "Running", "c": "Created"}, "Running",
                     id="runs-once-its-input-succeeded"),
        pytest.param({"p-a": _job("p-a", "Failed"), "p-b": _job("p-b", "Running")}, [],
                     {"a": "Failed", "b": "Running", "c": "Blocked"}, "Failed",
                     id="a-failed-stage-stops-the-pipeline"),
        pytest.param({"p-a": _job("p-a", "Running", owned=False)}, ["p-b"],
                     {"a": "Conflict", "b": "Created", "c": "Waiting"}, "Running",
                     id="a-foreign-job-is-left-alone"),
        pytest.param({n: _job(n, "Succeeded") for n in ("p-a", "p-b", "p-c")}, [],
                     {"a": "Succeeded", "b": "Succeeded", "c": "Succeeded"}, "Succeeded",
                     id="all-succeeded"),
    ],
)  # fmt: skip
def test_stages(
    jobs: dict[str, StageJob], created: list[str], states: dict[str, str], phase: str
) -> None:
    decision = decide_pipeline(_body(), jobs, NOW)
    assert [j["metadata"]["name"] for j in decision.create] == created
    assert _states(decision) == states
    assert decision.status.phase.value == phase
    for job in decision.create:
        assert job["metadata"]["ownerReferences"][0]["uid"] == UID


def test_suspend_is_propagated_and_nothing_new_starts() -> None:
    jobs = {"p-a": _job("p-a", "Running"), "p-b": _job("p-b", "Succeeded")}
    decision = decide_pipeline(_body(suspend=True), jobs, NOW)
    assert decision.suspend == (("p-a", True),)  # never a finished stage's
    assert decision.status.phase.value == "Suspended"
    done = {"p-a": _job("p-a", "Succeeded", suspend=True), "p-b": _job("p-b", "Succeeded")}
    assert decide_pipeline(_body(suspend=True), done, NOW).create == ()
    resumed = decide_pipeline(_body(), {"p-a": _job("p-a", "Suspended", suspend=True)}, NOW)
    assert resumed.suspend == (("p-a", False),)


def test_an_invalid_spec_creates_nothing_and_says_why() -> None:
    stages = [*STAGES, _stage("d", {"fromStage": "zz"})]
    decision = decide_pipeline(_body(stages), {}, NOW)
    assert decision.create == ()
    assert decision.invalid == (
        "spec.stages[3].spec.models.actor.fromStage: no stage named 'zz' (stages: a, b, c, d)"
    )
    assert decision.status.phase.value == "Failed"
