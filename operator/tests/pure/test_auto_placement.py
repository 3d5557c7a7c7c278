"""`placement.auto` on the operator: the allocation and status carry the choice and its
reasons, the pods' job.yaml holds the chosen values, render shows them, and what the operator
cannot decide (a size no name states) is refused naming placement.modelSize."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from rlhf_operator.api.v1alpha1 import ConditionType
from rlhf_operator.builders.allocation import plan
from rlhf_operator.builders.children import render_children
from rlhf_operator.builders.common import CONFIG_KEY, config_map_name
from rlhf_operator.reconcile.decide import decide
from rlhf_operator.reconcile.observed import Observed
from rlhf_operator.render import reasons_comment, render_file
from rlhf_operator.settings import OperatorSettings
from rlhf_trainer.config import JobConfig
from rlhf_trainer.distributed.plan import plan_placement

from .factories import job_body, make_job, make_spec, spec_dict

SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
AUTO_7B_16 = {"auto": True, "modelSize": "7B", "totalGpus": 16, "gpusPerNode": 8}
ROLES = ["model", "layout", "actor", "reference", "critic", "reward", "rollout"]


def test_allocation_is_the_papers_7b_layout_with_reasons() -> None:
    allocation = plan(make_spec(placement=AUTO_7B_16))
    assert allocation.gpus_per_role == {
        "actor": 4,
        "reference": 2,
        "critic": 4,
        "reward": 2,
        "rollout": 4,
    }
    assert (allocation.rollout_engines, allocation.tensor_parallel_size) == (4, 1)
    assert [(g.name, g.replicas, g.gpus_per_pod) for g in allocation.worker_groups] == [
        ("gpu8", 2, 8)
    ]
    assert list(allocation.reasons) == ROLES
    assert "for 7B on 16 GPUs" in allocation.reasons["layout"]


def test_explicit_placement_has_no_reasons() -> None:
    assert plan(make_spec(placement={"actorGpus": 2})).reasons == {}


def test_status_allocation_carries_the_reasons() -> None:
    decision = decide(job_body(spec=spec_dict(placement=AUTO_7B_16)), Observed(), SETTINGS, NOW)
    assert decision.status.allocation is not None
    reasons = decision.status.allocation.reasons
    assert list(reasons) == ROLES
    assert reasons["critic"].startswith("4 GPUs: 35.9 of 68.0 usable GiB per GPU (ZeRO-2")
    # camelCase on the wire, as kubectl shows it
    assert "reasons" in decision.status.to_manifest()["allocation"]


def _job_yaml(children: Any, name: str) -> dict[str, Any]:
    [config_map] = [
        o
        for o in children.support
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == config_map_name(name)
    ]
    loaded: dict[str, Any] = yaml.safe_load(config_map["data"][CONFIG_KEY])
    return loaded


def test_pods_get_the_chosen_values_and_place_what_the_pods_have() -> None:
    job = make_job(spec=spec_dict(placement=AUTO_7B_16))
    children = render_children(job, SETTINGS)
    doc = _job_yaml(children, job.name)
    p = doc["placement"]
    assert p["auto"] is False
    assert (p["actorGpus"], p["referenceGpus"], p["criticGpus"], p["rewardGpus"]) == (4, 2, 4, 2)
    assert (doc["training"]["zeroStage"], doc["training"]["adamOffload"]) == (2, False)
    assert (doc["rollout"]["numEngines"], doc["rollout"]["tensorParallelSize"]) == (4, 1)
    trainer = plan_placement(JobConfig.model_validate(doc))
    assert trainer.total_devices == children.allocation.total_gpus == 16


def test_render_shows_the_choice(tmp_path: Path) -> None:
    path = tmp_path / "auto.yaml"
    manifest = {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFJob",
        "metadata": {"name": "auto"},
        "spec": spec_dict(placement=AUTO_7B_16),
    }
    path.write_text(json.dumps(manifest))
    [rendered] = render_file(path, SETTINGS)
    assert rendered.problems == []
    assert list(rendered.reasons) == ROLES
    comment = reasons_comment(rendered)
    assert comment.startswith("# auto: placement.auto chose (status.allocation.reasons):\n")
    assert "#   rollout: 4 engines x tensor parallel 1" in comment


def test_a_size_the_operator_cannot_tell_is_refused() -> None:
    spec = spec_dict(
        models={"actor": {"pretrained": "org/my-policy"}},
        placement={"auto": True, "totalGpus": 16},
    )
    decision = decide(job_body(spec=spec), Observed(), SETTINGS, NOW)
    assert decision.apply == ()
    valid = next(c for c in decision.status.conditions if c.type is ConditionType.VALID)
    assert valid.status == "False"
    assert "spec.placement.modelSize: placement.auto needs the actor's size" in valid.message


def test_too_few_gpus_is_refused_with_the_numbers() -> None:
    spec = spec_dict(placement={"auto": True, "modelSize": "70B", "totalGpus": 2})
    decision = decide(job_body(spec=spec), Observed(), SETTINGS, NOW)
    assert decision.apply == ()
    valid = next(c for c in decision.status.conditions if c.type is ConditionType.VALID)
    assert (
        "spec.placement.totalGpus: a 70.0B actor needs >= 4 x 80 GiB GPUs with ZeRO-3 + Adam "
        "offload" in valid.message
    )
