"""What the operator takes as its own (no adoption by name), the generated token, and the
trainer's report as the operator reads it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlhf_operator.builders.children import render_children
from rlhf_operator.kube.apply import _with_generated, owns, whose
from rlhf_operator.reconcile.observed import parse_report
from rlhf_operator.settings import OperatorSettings
from rlhf_trainer.config.report import MAX_VALUE_BYTES, OUTCOME_KEY, PROGRESS_KEY

from .factories import make_job

SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
UID = "0b9d1c1e-1111-4222-8333-444455556666"
JSON = dict[str, Any]


def _children() -> dict[str, JSON]:
    job = make_job(checkpoint={"storage": {"size": "10Gi"}})  # retained: no owner reference
    return {f"{o['kind']}": o for o in render_children(job, SETTINGS).all}


def _existing(meta: JSON) -> JSON:
    return {"metadata": {"name": "x", **meta}}


def _controller(uid: str, kind: str = "RLHFJob") -> JSON:
    return {"ownerReferences": [{"kind": kind, "name": "j", "uid": uid, "controller": True}]}


MINE = {"app.kubernetes.io/managed-by": "rlhf-operator"}

OWNED_CASES = {
    # Children with a controller reference: the UID decides, nothing else.
    "same-controller": ("ServiceAccount", _controller(UID), True),
    "former-job-of-the-same-name": ("ServiceAccount", _controller("old-uid"), False),
    "another-controller": ("Role", _controller("other-uid", kind="Deployment"), False),
    "orphan": ("Role", {}, False),
    "orphan-with-our-labels": ("ConfigMap", {"labels": MINE}, False),
    "non-controller-reference": (
        "ServiceAccount",
        {"ownerReferences": [{"kind": "RLHFJob", "name": "j", "uid": UID}]},
        False,
    ),
    # The retained PVC: our label and this job's UID annotation, both.
    "pvc-ours": (
        "PersistentVolumeClaim",
        {"labels": MINE, "annotations": {"rlhf.dev/job-uid": UID}},
        True,
    ),
    "pvc-former-job": (
        "PersistentVolumeClaim",
        {"labels": MINE, "annotations": {"rlhf.dev/job-uid": "old-uid"}},
        False,
    ),
    "pvc-annotation-without-label": (
        "PersistentVolumeClaim",
        {"annotations": {"rlhf.dev/job-uid": UID}},
        False,
    ),
    "pvc-label-only": ("PersistentVolumeClaim", {"labels": MINE}, False),
}


@pytest.mark.parametrize(("kind", "meta", "owned"), OWNED_CASES.values(), ids=OWNED_CASES.keys())
def test_only_what_the_job_provably_owns_is_its_own(kind: str, meta: JSON, owned: bool) -> None:
    assert owns(_children()[kind], _existing(meta)) is owned


def test_a_job_without_a_uid_owns_nothing() -> None:
    job = make_job(uid="")
    for child in render_children(job, SETTINGS).all:
        assert not owns(child, child), child["kind"]


@pytest.mark.parametrize(
    ("meta", "said"),
    [
        (_controller("u", kind="Deployment"), "controlled by Deployment/j"),
        ({"annotations": {"rlhf.dev/job-uid": "old"}}, "kept from an earlier job"),
        ({}, "not created by this job"),
    ],
)
def test_a_conflict_says_whose_the_object_is(meta: JSON, said: str) -> None:
    assert said in whose(_existing(meta))


def test_generated_values_are_fresh_random_tokens_and_only_in_the_request() -> None:
    secret = _children()["Secret"]
    assert "data" not in secret and "stringData" not in secret  # the builder holds no secret
    first = _with_generated(secret, ("auth_token",))
    second = _with_generated(secret, ("auth_token",))
    token = first["stringData"]["auth_token"]
    assert len(token) >= 40 and token != second["stringData"]["auth_token"]
    assert "stringData" not in secret  # the desired object is not changed
    assert _with_generated(secret, ()) == secret


# --- the trainer's report --------------------------------------------------------------------

PROGRESS = {"step": 3, "totalSteps": 10, "progress": "3/10", "reward": 0.5}
OUTCOME = {"attempt": 1, "exitCode": 75, "failureClass": "Preempted", "message": "SIGTERM"}


def _data(**docs: Any) -> dict[str, str]:
    keys = {"progress": PROGRESS_KEY, "outcome": OUTCOME_KEY}
    return {keys[k]: v if isinstance(v, str) else json.dumps(v) for k, v in docs.items()}


def test_the_report_is_read_from_its_two_keys() -> None:
    report = parse_report(_data(progress=PROGRESS, outcome=OUTCOME))
    assert report is not None and report.step == 3 and report.reward == 0.5
    assert report.outcome is not None and report.outcome.exit_code == 75


@pytest.mark.parametrize(
    ("data", "step", "has_outcome"),
    [
        ({}, None, None),
        (_data(progress="{not json"), None, None),
        (_data(progress=[1, 2]), None, None),
        (_data(progress={"step": 2, "phase": "Succeeded"}), 0, False),  # unknown key: dropped
        (_data(progress={"step": -1}), 0, False),
        (_data(progress={**PROGRESS, "outcome": OUTCOME}), 3, False),  # only from its own key
        (_data(progress=PROGRESS, outcome={"exitCode": "zero"}), 3, False),
        (_data(progress="x" * (MAX_VALUE_BYTES + 1)), None, None),
        (_data(outcome=OUTCOME), 0, True),
    ],
    ids=[
        "empty",
        "not-json",
        "not-an-object",
        "unknown-key",
        "out-of-range",
        "outcome-smuggled-into-progress",
        "bad-outcome",
        "too-large",
        "outcome-only",
    ],
)
def test_a_broken_or_hostile_report_is_dropped_key_by_key(
    data: dict[str, str], step: int | None, has_outcome: bool | None
) -> None:
    report = parse_report(data)
    if step is None:
        assert report is None
        return
    assert report is not None and report.step == step
    assert (report.outcome is not None) is has_outcome
