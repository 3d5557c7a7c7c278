"""The pure translations: OpenAI job request -> RLHFJob spec, RLHFJob -> job object."""

from __future__ import annotations

from typing import Any

import pytest

from rlhf_gateway import jobview
from rlhf_gateway.errors import ApiError
from rlhf_gateway.jobrequest import (
    CreateJobRequest,
    FileRef,
    Translation,
    check_manifest,
    manifest,
    request_problems,
    translate,
)
from rlhf_gateway.settings import CatalogModel
from rlhf_trainer.config import AlgorithmName

from .harness import CATALOG

BASE = CatalogModel.model_validate(CATALOG[0])
TRAIN = FileRef("file-" + "a" * 24, "pvc://files/team-a/file-a.jsonl", "supervised")


def spec_of(body: dict[str, Any]) -> tuple[dict[str, Any], Translation]:
    req = CreateJobRequest.model_validate({"model": BASE.id, "training_file": TRAIN.id, **body})
    request_problems(req)
    plan = translate(
        req,
        base=BASE,
        actor=BASE.source.to_manifest(),
        training=TRAIN,
        validation=None,
        rl_algorithm=AlgorithmName.GRPO,
    )
    return plan.spec, plan


@pytest.mark.parametrize(
    ("body", "path", "value"),
    [
        ({}, ("algorithm", "name"), "sft"),
        (
            {"method": {"type": "dpo", "dpo": {"hyperparameters": {"beta": 0.3}}}},
            ("algorithm", "beta"),
            0.3,
        ),
        ({"method": {"type": "dpo"}}, ("data", "format"), "openai"),
        ({"hyperparameters": {"n_epochs": 3}}, ("training", "epochs"), 3),
        (
            {
                "method": {
                    "type": "supervised",
                    "supervised": {"hyperparameters": {"learning_rate_multiplier": 0.5}},
                }
            },
            ("training", "actorLearningRate"),
            0.005,
        ),
        ({"hyperparameters": {"batch_size": 8}}, ("training", "trainBatchSize"), 8),
        ({"hyperparameters": {"n_epochs": "auto"}}, ("training", "epochs"), None),
        ({"seed": 7}, ("training", "seed"), 7),
        ({}, ("placement", "device"), "cpu"),  # the catalog's defaults stay
    ],
    ids=[
        "sft",
        "dpo-beta",
        "openai-rows",
        "epochs",
        "lr-multiplier",
        "batch",
        "auto",
        "seed",
        "catalog-default",
    ],
)
def test_request_fields_land_in_the_spec(
    body: dict[str, Any], path: tuple[str, str], value: object
) -> None:
    spec, _ = spec_of(body)
    assert spec.get(path[0], {}).get(path[1]) == value


def test_problems_are_named_by_the_request_param_in_the_validators_words() -> None:
    body = {"method": {"type": "dpo", "dpo": {"hyperparameters": {"beta": -1.0}}}}
    spec, origin = spec_of(body)
    req = CreateJobRequest.model_validate({"model": BASE.id, "training_file": TRAIN.id, **body})
    with pytest.raises(ApiError) as caught:
        check_manifest(manifest("ftjob-x", req, spec, {}), origin, BASE.id)
    assert caught.value.status == 400
    assert caught.value.param == "method.dpo.hyperparameters.beta"
    assert caught.value.message.startswith(
        "method.dpo.hyperparameters.beta: Input should be greater than 0"
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"method": {"type": "supervised", "dpo": {}}}, "method.dpo"),
        ({"hyperparameters": {"beta": 0.1}}, "hyperparameters.beta"),
        ({"method": {"type": "reinforcement"}}, "method.reinforcement"),
        ({"integrations": [{"type": "wandb"}]}, "integrations"),
    ],
    ids=["other-method", "beta-for-sft", "no-grader", "integrations"],
)
def test_request_level_problems(body: dict[str, Any], param: str) -> None:
    req = CreateJobRequest.model_validate({"model": BASE.id, "training_file": TRAIN.id, **body})
    with pytest.raises(ApiError) as caught:
        request_problems(req)
    assert caught.value.param == param


def job(phase: str | None = None, **extra: Any) -> dict[str, Any]:
    req = CreateJobRequest.model_validate(
        {"model": BASE.id, "training_file": TRAIN.id, "suffix": "mine", "metadata": {"k": "v"}}
    )
    doc = manifest("ftjob-1", req, {}, {"n_epochs": 2})
    doc["metadata"].update(namespace="team-a", creationTimestamp="2026-12-01T10:00:00Z")
    doc["spec"] = extra.pop("spec", {})
    if phase is not None:
        doc["status"] = {"phase": phase, **extra}
    return doc


@pytest.mark.parametrize(
    ("doc", "status"),
    [
        (job(), "validating_files"),
        (job("Pending", conditions=[{"type": "Valid", "status": "True"}]), "queued"),
        (job("Provisioning", conditions=[{"type": "Valid", "status": "True"}]), "queued"),
        (job("Running"), "running"),
        (job("Suspended"), "paused"),
        (job("Running", spec={"runPolicy": {"suspend": True}}), "paused"),
        (
            job("Suspended", conditions=[{"type": "Suspended", "reason": "SuspendedByUser"}]),
            "queued",
        ),
        (
            job(
                "Suspended",
                spec={"runPolicy": {"suspend": True}},
                conditions=[{"type": "Suspended", "reason": "SuspendedByUser"}],
            ),
            "paused",
        ),
        (job("Succeeded"), "succeeded"),
        (job("Failed"), "failed"),
        (
            job(
                "Pending",
                conditions=[
                    {
                        "type": "Valid",
                        "status": "False",
                        "reason": "SpecInvalid",
                        "message": "spec.x: bad",
                    }
                ],
            ),
            "failed",
        ),
    ],
    ids=[
        "new",
        "valid",
        "provisioning",
        "running",
        "suspended",
        "suspend-asked",
        "resumed-not-yet-restarted",
        "paused-by-the-user",
        "succeeded",
        "failed",
        "invalid",
    ],
)
def test_status_mapping(doc: dict[str, Any], status: str) -> None:
    assert jobview.job_status(doc) == status


def test_a_succeeded_job_shows_its_model_and_times() -> None:
    doc = job(
        "Succeeded",
        completionTime="2026-12-01T11:00:00Z",
        output={"model": "pvc://job/final"},
    )
    obj = jobview.job_object(doc)
    assert obj.fine_tuned_model == "ft:tiny-llama-random:team-a:mine:ftjob-1"
    assert jobview.job_of_model(obj.fine_tuned_model) == "ftjob-1"
    assert obj.finished_at == obj.created_at + 3600
    assert obj.metadata == {"k": "v"} and obj.hyperparameters.n_epochs == 2
    doc["metadata"]["annotations"][jobview.MODEL_DELETED_ANNOTATION] = "2026-12-01T12:00:00Z"
    assert jobview.job_object(doc).fine_tuned_model is None


def test_a_failed_job_says_why() -> None:
    doc = job(
        "Failed",
        conditions=[
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "3 attempts",
            }
        ],
    )
    error = jobview.job_object(doc).error
    assert error is not None and error.code == "BackoffLimitExceeded"
    assert error.message == "3 attempts"


@pytest.mark.parametrize(
    ("code", "message", "status", "error_code"),
    [
        (
            403,
            'rlhfjobs.rlhf.dev "ftjob-1" is forbidden: exceeded quota: rlhf, requested: '
            "count/rlhfjobs.rlhf.dev=1, used: count/rlhfjobs.rlhf.dev=10, limited: "
            "count/rlhfjobs.rlhf.dev=10",
            429,
            "quota_exceeded",
        ),
        (403, 'User "x" cannot create resource "rlhfjobs"', 403, "forbidden"),
        (404, 'rlhfjobs.rlhf.dev "ftjob-1" not found', 404, "not_found"),
        (409, "the object has been modified", 409, "conflict"),
        (422, "spec.x: Invalid value", 400, None),
        (500, "etcd is down", 502, "upstream_error"),
    ],
    ids=["quota", "rbac", "missing", "conflict", "invalid", "server"],
)
def test_api_server_refusals_become_openai_errors(
    code: int, message: str, status: int, error_code: str | None
) -> None:
    from rlhf_gateway.kube import KubeError
    from rlhf_gateway.tenantapi import translate as translate_error

    error = translate_error(KubeError(code, "", message), what="fine-tuning job", ident="ftjob-1")
    assert (error.status, error.code) == (status, error_code)


def test_the_docs_catalog_makes_jobs_the_validators_accept() -> None:
    """docs/service.md's gateway values: valid settings, and each method on its catalog model
    gives an RLHFJob that `rlhf validate` would accept."""
    import pathlib
    import re

    import yaml

    from rlhf_gateway.settings import GatewaySettings

    docs = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "service.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", docs, re.S) if "gateway:" in b)
    config = yaml.safe_load(block)["gateway"]["config"]
    repo = pathlib.Path(__file__).resolve().parents[3]
    chart = yaml.safe_load((repo / "helm" / "rlhf-operator" / "values.yaml").read_text())
    defaults = chart["gateway"]["config"]  # helm merges the chart's defaults under them
    merged = {**defaults, **config, "files": {**defaults["files"], **config["files"]}}
    settings = GatewaySettings.model_validate(merged)
    entry = settings.catalog[0]
    grader = {
        "type": "string_check",
        "name": "exact",
        "operation": "eq",
        "input": "{{sample.output_text}}",
        "reference": "{{item.answer}}",
    }
    for method in (
        {"type": "supervised"},
        {"type": "dpo"},
        {"type": "reinforcement", "reinforcement": {"grader": grader}},
    ):
        req = CreateJobRequest.model_validate(
            {"model": entry.id, "training_file": TRAIN.id, "method": method}
        )
        plan = translate(
            req,
            base=entry,
            actor=entry.source.to_manifest(),
            training=TRAIN,
            validation=None,
            rl_algorithm=settings.reinforcement_algorithm,
            reward={"models.graderReward.grader": grader}
            if method["type"] == "reinforcement"
            else None,
        )
        check_manifest(manifest("ftjob-docs", req, plan.spec, {}), plan, entry.id)
