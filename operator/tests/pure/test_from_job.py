"""`fromJob` model sources: wait, fail, resolve and pin (reconcile.decide, table by table)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from rlhf_operator.builders.common import CONFIG_KEY
from rlhf_operator.reconcile.decide import decide
from rlhf_operator.reconcile.inputs import Producer
from rlhf_operator.reconcile.observed import Observed
from rlhf_operator.settings import OperatorSettings

from .factories import job_body

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test")
SFT_MODEL = "pvc://sft-a-checkpoints/sft-a/output/final"
RM_MODEL = "pvc://rm-a-checkpoints/rm-a/output/final"

CONSUMER_MODELS = {
    "actor": {"pretrained": None, "fromJob": "sft-a"},
    "rewardModels": [{"fromJob": "rm-a", "weight": 2.0}],
}


def _producer(name: str, phase: str | None, model: str | None = None, msg: str = "") -> Producer:
    return Producer(name=name, uid=f"uid-{name}", phase=phase, model=model, message=msg)


def _decide(producers: dict[str, Producer | None], status: dict[str, Any] | None = None) -> Any:
    body = job_body("ppo-a", models=CONSUMER_MODELS, status=status)
    return decide(body, Observed(producers=producers), SETTINGS, NOW)


def _conditions(decision: Any) -> dict[str, tuple[str, str]]:
    return {c.type.value: (c.status.value, c.reason.value) for c in decision.status.conditions}


@pytest.mark.parametrize(
    ("producers", "phase", "reason", "words"),
    [
        pytest.param(
            {"sft-a": None, "rm-a": _producer("rm-a", "Succeeded", RM_MODEL)},
            "Pending",
            "WaitingForJob",
            "waiting for RLHFJob sft-a, which does not exist",
            id="producer-missing",
        ),
        pytest.param(
            {"sft-a": _producer("sft-a", "Running"), "rm-a": _producer("rm-a", "Pending")},
            "Pending",
            "WaitingForJob",
            "waiting for RLHFJob sft-a to succeed (it is Running)",
            id="producer-running",
        ),
        pytest.param(
            {
                "sft-a": _producer("sft-a", "Failed", msg="backoffLimit (3) exceeded"),
                "rm-a": _producer("rm-a", "Running"),
            },
            "Failed",
            "InputJobFailed",
            "spec.models.actor.fromJob: RLHFJob sft-a failed: backoffLimit (3) exceeded",
            id="producer-failed",
        ),
        pytest.param(
            {"sft-a": _producer("sft-a", "Succeeded", None), "rm-a": _producer("rm-a", "Running")},
            "Failed",
            "InputJobFailed",
            "succeeded without exporting a model",
            id="producer-exported-nothing",
        ),
    ],
)
def test_nothing_is_created_until_every_input_job_succeeded(
    producers: dict[str, Producer | None], phase: str, reason: str, words: str
) -> None:
    decision = _decide(producers)
    assert decision.apply == ()
    assert decision.status.phase.value == phase
    assert _conditions(decision)["InputsReady"] == ("False", reason)
    assert words in (decision.status.message or "")
    assert decision.invalid is None


def test_succeeded_inputs_are_passed_as_pretrained_and_recorded() -> None:
    producers = {
        "sft-a": _producer("sft-a", "Succeeded", SFT_MODEL),
        "rm-a": _producer("rm-a", "Succeeded", RM_MODEL),
    }
    decision = _decide(producers)
    kinds = [d.kind for d in decision.apply]
    assert "RayJob" in kinds
    config_map = next(d.obj for d in decision.apply if d.name == "ppo-a-config")
    config = yaml.safe_load(config_map["data"][CONFIG_KEY])
    # Mounted read-only where the usual pvc:// inputs go.
    assert (
        config["models"]["actor"]["pretrained"]
        == "/inputs/pvc/sft-a-checkpoints/sft-a/output/final"
    )
    assert config["models"]["rewardModels"][0] == {
        "pretrained": "/inputs/pvc/rm-a-checkpoints/rm-a/output/final",
        "trustRemoteCode": False,
        "weight": 2.0,
    }
    inputs = [i.to_manifest() for i in decision.status.inputs]
    assert inputs == [
        {"role": "actor", "fromJob": "sft-a", "uid": "uid-sft-a", "model": SFT_MODEL},
        {"role": "rewardModels[0]", "fromJob": "rm-a", "uid": "uid-rm-a", "model": RM_MODEL},
    ]
    assert _conditions(decision)["InputsReady"] == ("True", "InputsResolved")
    ray_job = next(d.obj for d in decision.apply if d.kind == "RayJob")
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in ray_job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert {"sft-a-checkpoints", "rm-a-checkpoints"} <= claims


def test_recorded_inputs_are_pinned() -> None:
    """A producer that changed (re-created: new uid, another output) changes nothing."""
    first = _decide(
        {
            "sft-a": _producer("sft-a", "Succeeded", SFT_MODEL),
            "rm-a": _producer("rm-a", "Succeeded", RM_MODEL),
        }
    )
    status = first.status.to_manifest()
    again = _decide({"sft-a": _producer("sft-a", "Running"), "rm-a": None}, status=status)
    assert [i.model for i in again.status.inputs] == [SFT_MODEL, RM_MODEL]
    assert [i.uid for i in again.status.inputs] == ["uid-sft-a", "uid-rm-a"]
    assert "RayJob" in [d.kind for d in again.apply]


def test_a_failed_input_recovers_when_the_producer_succeeds_later() -> None:
    failed = _decide(
        {"sft-a": _producer("sft-a", "Failed"), "rm-a": _producer("rm-a", "Succeeded", RM_MODEL)}
    )
    assert failed.status.phase.value == "Failed"
    later = _decide(
        {
            "sft-a": _producer("sft-a", "Succeeded", SFT_MODEL),
            "rm-a": _producer("rm-a", "Succeeded", RM_MODEL),
        },
        status=failed.status.to_manifest(),
    )
    assert later.status.phase.value != "Failed"
    assert _conditions(later)["Failed"][0] == "False"
    assert "RayJob" in [d.kind for d in later.apply]


def test_from_stage_in_a_plain_job_is_refused() -> None:
    body = job_body("ppo-a", models={"actor": {"pretrained": None, "fromStage": "sft"}})
    decision = decide(body, Observed(), SETTINGS, NOW)
    assert decision.invalid is not None
    assert "spec.models.actor.fromStage" in decision.invalid
    assert "only an RLHFPipeline's stages" in decision.invalid


def test_every_model_role_is_watched_for_its_producer() -> None:
    """The raw scan (each pass, no validation) finds the same fromJob roles as the model."""
    from rlhf_operator.reconcile.inputs import named_jobs
    from rlhf_trainer.config.sources import SINGLE_ROLES

    models = {role: {"fromJob": f"{role}-job"} for role in SINGLE_ROLES}
    models["rewardModels"] = [{"pretrained": "org/rm"}, {"fromJob": "rm-job"}]
    body = {"spec": {"models": models}}
    expected = [(role, f"{role}-job") for role in SINGLE_ROLES] + [("rewardModels[1]", "rm-job")]
    assert named_jobs(body) == expected
