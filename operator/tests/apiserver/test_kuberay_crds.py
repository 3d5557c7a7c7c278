"""KubeRay's real RayJob CRD on the real apiextensions-apiserver.

Proves the tier itself: the CRD installs, a minimal RayJob is accepted and defaulted, wrong types
are rejected with 422 naming the field, unknown fields are rejected under fieldValidation=Strict
(and silently pruned without it, which is why the operator must write strict-valid objects).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest

from .client import ApiClient
from .server import REPO_ROOT

pytestmark = pytest.mark.apiserver

# The same place as every other KubeRay-schema test reads (`pure/kuberay.py`).
KUBERAY_CRDS = Path(
    os.environ.get("KUBERAY_CRDS_DIR", REPO_ROOT.parent / "shared" / "kuberay-crds")
)
RAYJOB: dict[str, Any] = {
    "apiVersion": "ray.io/v1",
    "kind": "RayJob",
    "metadata": {"name": "tiny", "namespace": "default"},
    "spec": {
        "entrypoint": "python -c 'print(1)'",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": {
            "headGroupSpec": {
                "rayStartParams": {"num-cpus": "1"},
                "template": {
                    "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}
                },
            }
        },
    },
}


def rayjob(**spec_changes: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(RAYJOB)
    manifest["spec"].update(spec_changes)
    return manifest


def head_params(params: dict[str, Any]) -> dict[str, Any]:
    head = copy.deepcopy(RAYJOB["spec"]["rayClusterSpec"])
    head["headGroupSpec"]["rayStartParams"] = params
    return rayjob(rayClusterSpec=head)


@pytest.fixture(scope="session")
def rayjob_crd(apiserver_session: ApiClient) -> dict[str, Any]:
    path = KUBERAY_CRDS / "ray.io_rayjobs.yaml"
    if not path.exists():
        pytest.skip(f"KUBERAY CRDS ABSENT: {path} missing; KubeRay CRD tests not run")
    return apiserver_session.apply_crd(path).raise_for_error()


def test_rayjob_crd_is_established_with_both_versions(
    apiserver: ApiClient, rayjob_crd: dict[str, Any]
) -> None:
    conditions = {c["type"]: c["status"] for c in rayjob_crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    assert ("ray.io/v1", "RayJob") in apiserver.installed_kinds()
    assert ("ray.io/v1alpha1", "RayJob") in apiserver.installed_kinds()


def test_minimal_rayjob_is_accepted_and_defaulted(
    apiserver: ApiClient, rayjob_crd: dict[str, Any]
) -> None:
    created = apiserver.create(rayjob())
    assert created.ok, str(created)
    assert created.status == 201
    stored = apiserver.get(RAYJOB).raise_for_error()
    # Defaults from the CRD schema, applied by the server.
    assert stored["spec"]["submissionMode"] == "K8sJobMode"
    assert stored["spec"]["ttlSecondsAfterFinished"] == 0
    assert stored["metadata"]["generation"] == 1


def test_dry_run_validates_without_persisting(
    apiserver: ApiClient, rayjob_crd: dict[str, Any]
) -> None:
    result = apiserver.create(rayjob(), dry_run=True)
    assert result.ok, str(result)
    assert apiserver.get(RAYJOB).status == 404


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        pytest.param(
            head_params({"num-cpus": 1}),
            "spec.rayClusterSpec.headGroupSpec.rayStartParams.num-cpus",
            id="rayStartParams-value-not-string",
        ),
        pytest.param(
            rayjob(shutdownAfterJobFinishes="yes"),
            "spec.shutdownAfterJobFinishes",
            id="bool-as-string",
        ),
        pytest.param(
            rayjob(ttlSecondsAfterFinished="ten"),
            "spec.ttlSecondsAfterFinished",
            id="int-as-string",
        ),
        pytest.param(rayjob(entrypoint=["python"]), "spec.entrypoint", id="string-as-list"),
    ],
)
def test_wrongly_typed_field_is_rejected_with_422_naming_it(
    apiserver: ApiClient, rayjob_crd: dict[str, Any], manifest: dict[str, Any], field: str
) -> None:
    result = apiserver.create(manifest, dry_run=True)
    assert result.status == 422, str(result)
    assert field in result.fields, str(result)
    assert field in result.message


def test_unknown_field_is_rejected_when_strict_and_pruned_otherwise(
    apiserver: ApiClient, rayjob_crd: dict[str, Any]
) -> None:
    # The classic typo: `shutdownAfterJobFinish` for `shutdownAfterJobFinishes`.
    typo = rayjob(shutdownAfterJobFinish=True)
    strict = apiserver.create(typo, dry_run=True)
    assert strict.status == 400, str(strict)
    assert 'unknown field "spec.shutdownAfterJobFinish"' in strict.message

    lenient = apiserver.create(typo, strict=False)
    assert lenient.ok, str(lenient)
    assert any("spec.shutdownAfterJobFinish" in w for w in lenient.warnings)
    assert "shutdownAfterJobFinish" not in apiserver.get(RAYJOB).raise_for_error()["spec"]


def test_updates_bump_generation_and_stale_writes_conflict(
    apiserver: ApiClient, rayjob_crd: dict[str, Any]
) -> None:
    original = apiserver.create(rayjob()).raise_for_error()
    patched = apiserver.patch(RAYJOB, {"spec": {"entrypoint": "python train.py"}})
    assert patched.ok, str(patched)
    assert patched.body["metadata"]["generation"] == 2

    stale = copy.deepcopy(original)  # still carries the first resourceVersion
    stale["spec"]["entrypoint"] = "python other.py"
    conflict = apiserver.update(stale)
    assert conflict.status == 409, str(conflict)

    bad_patch = apiserver.patch(RAYJOB, {"spec": {"suspend": "no"}})
    assert bad_patch.status == 422
    assert "spec.suspend" in bad_patch.fields


def test_status_is_a_subresource(apiserver: ApiClient, rayjob_crd: dict[str, Any]) -> None:
    apiserver.create(rayjob()).raise_for_error()
    # Writes to the main resource ignore status; the status subresource ignores spec.
    ignored = apiserver.patch(RAYJOB, {"status": {"jobStatus": "RUNNING"}})
    assert ignored.ok, str(ignored)
    assert "jobStatus" not in ignored.body.get("status", {})

    via_status = apiserver.patch(RAYJOB, {"status": {"jobStatus": "RUNNING"}}, subresource="status")
    assert via_status.ok, str(via_status)
    assert via_status.body["status"]["jobStatus"] == "RUNNING"
    assert via_status.body["metadata"]["generation"] == 1


def test_cleanup_leaves_namespace_empty(apiserver: ApiClient, rayjob_crd: dict[str, Any]) -> None:
    for name in ("a", "b"):
        job = rayjob()
        job["metadata"]["name"] = name
        apiserver.create(job).raise_for_error()
    apiserver.delete_all("ray.io/v1", "RayJob")
    assert apiserver.list_objects("ray.io/v1", "RayJob") == []
