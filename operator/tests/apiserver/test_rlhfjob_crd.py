"""Our generated CRD on the real apiextensions-apiserver (Kubernetes 1.36 code): it installs,
every example is accepted, defaults are filled in, the invalid corpus is rejected by the server
where the schema or CEL can express the rule (with a message naming the field), immutable
fields stay immutable, and the status subresource and printer columns behave."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corpus import InvalidCase, base_manifest, deep_merge, invalid_cases
from rlhf_trainer.config import JobSpec
from support.examples import example_files, example_id

from .client import ApiClient, ApiResult, load_manifests

pytestmark = pytest.mark.apiserver

REPO = Path(__file__).resolve().parents[3]
CRD = REPO / "crds" / "rlhf.dev_rlhfjobs.yaml"
PIPELINE_CRD = REPO / "crds" / "rlhf.dev_rlhfpipelines.yaml"
EXAMPLES = example_files()
CASES = invalid_cases()
SERVER_CREATE = [c for c in CASES if c.server and c.update is None]
CLIENT_ONLY = [c for c in CASES if not c.server]
UPDATES = [c for c in CASES if c.update is not None]


@pytest.fixture
def api(apiserver: ApiClient) -> Iterator[ApiClient]:
    apiserver.apply_crd(CRD).raise_for_error()
    # The examples hold RLHFPipelines too (their CEL rules must fit the server's cost budget).
    apiserver.apply_crd(PIPELINE_CRD).raise_for_error()
    yield apiserver


def _named(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    out = copy.deepcopy(manifest)
    if len(out["metadata"]["name"]) <= 40:
        out["metadata"]["name"] = name
    return out


def _mentions(result: ApiResult, path: str) -> bool:
    text = str(result)
    # The server writes list indices as [0] like we do, and CEL rule messages name the field
    # through fieldPath (or the node the rule sits on).
    return path in text or path.removeprefix("spec.") in text


@pytest.mark.parametrize("path", EXAMPLES, ids=example_id)
def test_examples_are_accepted(api: ApiClient, path: Path) -> None:
    for manifest in load_manifests(path):
        result = api.create(manifest, dry_run=True)
        assert result.ok, str(result)
        assert not result.warnings, result.warnings


def test_defaults_are_filled_in_by_the_server(api: ApiClient) -> None:
    created = api.create(base_manifest()).raise_for_error()
    spec = created["spec"]
    assert spec["rollout"]["temperature"] == 1.0
    assert spec["algorithm"]["lambda"] == 0.95
    assert spec["training"]["zeroStage"] == 2
    assert spec["placement"]["resources"]["headCpu"] == "2"
    assert spec["checkpoint"]["resume"] == "auto"
    assert "critic" not in spec["models"], "optional models must stay absent, not null"
    assert created["metadata"]["generation"] == 1


@pytest.mark.parametrize("case", SERVER_CREATE, ids=lambda c: c.id)
def test_server_rejects_invalid_manifest_naming_the_field(
    api: ApiClient, case: InvalidCase
) -> None:
    result = api.create(_named(case.manifest, f"bad-{CASES.index(case)}"), dry_run=True)
    assert not result.ok, f"{case.id} was accepted by the server"
    assert result.status in (400, 422), str(result)
    assert _mentions(result, case.expect), str(result)


# colocateActorReference with actorGpus != referenceGpus, valid where no reference model is
# placed (`rlhf_trainer.config.roles.uses_reference`): the CEL rule must not refuse them.
_UNEQUAL_COLOCATED = {
    "placement": {"colocateActorReference": True, "actorGpus": 2, "referenceGpus": 1},
    "training": {"microTrainBatchSize": 1},
}
NO_REFERENCE_PLACED = {
    "ppo-without-kl-integer-zero": {"algorithm": {"name": "ppo", "klCoef": 0}},
    "grpo-without-kl": {"algorithm": {"name": "grpo", "klCoef": 0.0}},
    "iterative-dpo-refreshing-its-reference": {
        "algorithm": {"name": "iterative-dpo", "refreshReference": True, "iterations": 2}
    },
    "sft": {"algorithm": {"name": "sft"}, "models": {"rewardFunction": None}},
}


@pytest.mark.parametrize("patch", NO_REFERENCE_PLACED.values(), ids=list(NO_REFERENCE_PLACED))
def test_colocation_binds_only_a_placed_reference(api: ApiClient, patch: dict[str, Any]) -> None:
    """The pydantic rule checks actorGpus == referenceGpus only when the job places a
    reference; the CEL rule says the same (the corpus holds the refused case: ppo with KL)."""
    manifest = deep_merge(base_manifest(), {"spec": deep_merge(_UNEQUAL_COLOCATED, patch)})
    JobSpec.model_validate(manifest["spec"])  # `rlhf validate` and the operator accept it
    result = api.create(_named(manifest, "coloc-no-ref"), dry_run=True)
    assert result.ok, str(result)


@pytest.mark.parametrize("case", CLIENT_ONLY, ids=lambda c: c.id)
def test_rules_beyond_cel_pass_the_server(api: ApiClient, case: InvalidCase) -> None:
    """These need `rlhf validate` / the operator: the corpus marks them honestly."""
    result = api.create(_named(case.manifest, f"ok-{CASES.index(case)}"), dry_run=True)
    assert result.ok, f"{case.id} is rejected by the server: mark it server: true ({result})"


@pytest.mark.parametrize("case", UPDATES, ids=lambda c: c.id)
def test_immutable_fields(api: ApiClient, case: InvalidCase) -> None:
    created = api.create(_named(base_manifest(), f"imm-{CASES.index(case)}")).raise_for_error()
    changed = case.updated_manifest
    changed["metadata"] = created["metadata"]
    result = api.update(changed)
    assert not result.ok, f"{case.id}: the update was accepted"
    assert _mentions(result, case.expect), str(result)
    # A mutable field can still change, and bumps the generation.
    mutable = copy.deepcopy(created)
    mutable["spec"]["runPolicy"]["suspend"] = True
    updated = api.update(mutable).raise_for_error()
    assert updated["metadata"]["generation"] == 2


def test_status_subresource_and_printer_columns(api: ApiClient) -> None:
    created = api.create(_named(base_manifest(), "columns")).raise_for_error()
    # Status written through the main resource is ignored...
    with_status = {**created, "status": {"phase": "Running"}}
    assert "status" not in api.update(with_status).raise_for_error()
    # ...and accepted through /status, validated against our status model.
    current = api.get(created).raise_for_error()
    current["status"] = {
        "phase": "Running",
        "restarts": 1,
        "totalGpus": 16,
        "trainer": {"step": 3, "totalSteps": 10, "progress": "3/10", "reward": 0.5},
    }
    stored = api.update_status(current).raise_for_error()
    assert stored["status"]["trainer"]["progress"] == "3/10"
    assert stored["metadata"]["generation"] == created["metadata"]["generation"]
    bad = {**stored, "status": {"phase": "Exploded"}}
    assert not api.update_status(bad).ok

    table = api.session.get(
        api.server.url + "/apis/rlhf.dev/v1alpha1/namespaces/default/rlhfjobs",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        timeout=30,
    ).json()
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns == [
        "Name",
        "Phase",
        "Algorithm",
        "Progress",
        "Reward",
        "GPUs",
        "Restarts",
        "Age",
    ]
    row = table["rows"][0]["cells"]
    assert row[:7] == ["columns", "Running", "ppo", "3/10", 0.5, 16, 1]


def test_corpus_split(api: ApiClient) -> None:
    """The numbers quoted in the closing note: how many cases each layer catches."""
    assert len(CASES) >= 25
    assert len(SERVER_CREATE) + len(UPDATES) >= 25
    assert len(CLIENT_ONLY) >= 1
