"""The operator's apply (`kube.apply`, server-side apply as `rlhf-operator`) against the real
apiextensions-apiserver, on KubeRay's RayJob CRD: the semantics the emulator only approximates.

- a field the operator applied before and no longer applies is removed, one another manager
  set is kept (Kueue's `spec.suspend`, carried over from the live object under a
  resourceVersion precondition that turns a concurrent change into a 409);
- managedFields name `rlhf-operator` with operation Apply;
- an object with a child's name that the job does not own is left byte-identical;
- a child the operator made before server-side apply (POST and PUT as `rlhf-operator`, a
  desired-hash annotation) is taken over: its Update entry folded into the Apply entry, so
  the next apply removes the annotation and the fields the spec no longer sets.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest

from rlhf_operator.kube.apply import Outcome, _with_live, apply
from rlhf_operator.kube.client import ApiError, KubeApi, path_of
from rlhf_operator.kube.takeover import LEGACY_HASH_ANNOTATION
from rlhf_operator.reconcile.desired import Desired

from .client import ApiClient
from .test_kuberay_crds import RAYJOB, rayjob_crd  # noqa: F401 (a fixture)

pytestmark = pytest.mark.apiserver

JOB_UID = "6d1c1c52-2f4c-4a8e-9d0e-1b0c9c6f0a11"
SUSPEND = (("spec", "suspend"),)


def child(name: str, *, uid: str = JOB_UID, **spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(RAYJOB)
    obj["metadata"] = {
        "name": name,
        "namespace": "default",
        "labels": {"rlhf.dev/job": "ssa", "kueue.x-k8s.io/queue-name": "research"},
        "ownerReferences": [
            {
                "apiVersion": "rlhf.dev/v1alpha1",
                "kind": "RLHFJob",
                "name": "ssa",
                "uid": uid,
                "controller": True,
            }
        ],
    }
    obj["spec"].update(spec)
    return obj


@pytest.fixture
async def kube(
    apiserver: ApiClient,
    rayjob_crd: dict[str, Any],  # noqa: F811 (the fixture imported above)
) -> AsyncIterator[KubeApi]:
    pki = apiserver.server.pki
    info = kopf.ConnectionInfo(
        server=apiserver.server.url,
        ca_path=str(pki.ca_cert),
        certificate_path=str(pki.client_cert),
        private_key_path=str(pki.client_key),
    )
    api = KubeApi(lambda: info)
    yield api
    await api.close()


async def test_apply_removes_what_it_stops_applying_and_keeps_what_others_set(
    apiserver: ApiClient, kube: KubeApi
) -> None:
    first = child("ssa-r0", suspend=True, activeDeadlineSeconds=600)
    created = await apply(kube, Desired(first, preserve=SUSPEND))
    assert created.outcome is Outcome.CREATED
    managers = {(m["manager"], m["operation"]) for m in created.obj["metadata"]["managedFields"]}
    assert ("rlhf-operator", "Apply") in managers

    # Kueue admits the job (another manager, by a plain patch).
    apiserver.patch(first, {"spec": {"suspend": False}}).raise_for_error()

    # The spec no longer sets the deadline nor the queue label: applied again, both go, and
    # Kueue's decision stays.
    second = copy.deepcopy(first)
    second["spec"].pop("activeDeadlineSeconds")
    second["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    updated = await apply(kube, Desired(second, preserve=SUSPEND))
    assert updated.outcome is Outcome.UPDATED
    live = apiserver.get(first).raise_for_error()
    assert "activeDeadlineSeconds" not in live["spec"]
    assert live["metadata"]["labels"] == {"rlhf.dev/job": "ssa"}
    assert live["spec"]["suspend"] is False

    # Nothing new: the server stores nothing.
    again = await apply(kube, Desired(second, preserve=SUSPEND))
    assert again.outcome is Outcome.UNCHANGED
    assert again.obj["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]

    # A value read before someone else's change is not put back: the precondition says 409.
    stale = _with_live(second, live, SUSPEND)
    apiserver.patch(first, {"spec": {"suspend": True}}).raise_for_error()
    with pytest.raises(ApiError) as refused:
        await kube.apply(stale)
    assert refused.value.status == 409


async def test_an_object_the_job_does_not_own_is_left_byte_identical(
    apiserver: ApiClient, kube: KubeApi
) -> None:
    theirs = child("ssa-r1", uid="11111111-2222-3333-4444-555555555555")
    before = apiserver.create(theirs).raise_for_error()
    ours = child("ssa-r1", activeDeadlineSeconds=5)
    applied = await apply(kube, Desired(ours))
    assert applied.outcome is Outcome.CONFLICT
    assert "controlled by RLHFJob/ssa" in applied.owner
    assert apiserver.get(theirs).raise_for_error() == before


def _managers(obj: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m["manager"], m["operation"]) for m in obj["metadata"]["managedFields"]}


async def test_a_child_of_the_operator_before_server_side_apply_is_taken_over(
    apiserver: ApiClient, kube: KubeApi
) -> None:
    # As the operator before server-side apply wrote it: POST, then PUT, as `rlhf-operator`
    # (its User-Agent, no fieldManager: operation Update), with its desired-hash annotation.
    old = child("ssa-r2", suspend=True, activeDeadlineSeconds=600)
    old["metadata"]["annotations"] = {LEGACY_HASH_ANNOTATION: "0123456789abcdef0123"}
    created = await kube.request("POST", path_of(old, named=False), old, kind="RayJob")
    replaced = copy.deepcopy(created)
    replaced["metadata"]["labels"]["rlhf.dev/written-by"] = "put"
    replaced = await kube.request("PUT", path_of(old), replaced, kind="RayJob")
    assert _managers(replaced) == {("rlhf-operator", "Update")}
    # Kueue admits it.
    apiserver.patch(old, {"spec": {"suspend": False}}).raise_for_error()

    # The new operator's spec sets neither the deadline nor the labels of the queue and the PUT.
    new = child("ssa-r2", suspend=True)
    new["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    applied = await apply(kube, Desired(new, preserve=SUSPEND))
    assert applied.outcome is Outcome.UPDATED
    live = apiserver.get(old).raise_for_error()
    assert "activeDeadlineSeconds" not in live["spec"]
    assert live["metadata"]["labels"] == {"rlhf.dev/job": "ssa"}
    assert LEGACY_HASH_ANNOTATION not in (live["metadata"].get("annotations") or {})
    assert live["spec"]["suspend"] is False  # Kueue's, kept
    managers = _managers(live)
    assert ("rlhf-operator", "Apply") in managers
    assert ("rlhf-operator", "Update") not in managers

    # Once taken over, applying the same again stores nothing.
    again = await apply(kube, Desired(new, preserve=SUSPEND))
    assert again.outcome is Outcome.UNCHANGED
    assert again.obj["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]


async def test_a_create_only_child_of_the_old_operator_loses_its_annotation_only(
    apiserver: ApiClient, kube: KubeApi
) -> None:
    old = child("ssa-r3", activeDeadlineSeconds=600)
    old["metadata"]["annotations"] = {LEGACY_HASH_ANNOTATION: "0123456789abcdef0123"}
    await kube.request("POST", path_of(old, named=False), old, kind="RayJob")
    kept = await apply(kube, Desired(child("ssa-r3"), create_only=True))
    assert kept.outcome is Outcome.UPDATED
    live = apiserver.get(old).raise_for_error()
    assert LEGACY_HASH_ANNOTATION not in (live["metadata"].get("annotations") or {})
    assert live["spec"]["activeDeadlineSeconds"] == 600  # create-only: never changed
    again = await apply(kube, Desired(child("ssa-r3"), create_only=True))
    assert again.outcome is Outcome.UNCHANGED


async def test_a_new_jobs_child_is_created_without_a_look_and_applied_from_its_first_change(
    apiserver: ApiClient, kube: KubeApi
) -> None:
    first = child("ssa-r4", activeDeadlineSeconds=600)
    created = await apply(kube, Desired(first), probably_new=True)
    assert created.outcome is Outcome.CREATED
    assert _managers(created.obj) == {("rlhf-operator", "Update")}  # a POST's entry

    # Its first change: what the spec stopped setting goes (the POST's entry is taken over).
    second = copy.deepcopy(first)
    second["spec"].pop("activeDeadlineSeconds")
    second["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    updated = await apply(kube, Desired(second), known_ours=True)
    assert updated.outcome is Outcome.UPDATED
    live = apiserver.get(first).raise_for_error()
    assert "activeDeadlineSeconds" not in live["spec"]
    assert live["metadata"]["labels"] == {"rlhf.dev/job": "ssa"}
    assert _managers(live) == {("rlhf-operator", "Apply")}

    # A name already taken: the POST's 409 changed nothing, the look finds it someone else's.
    theirs = child("ssa-r5", uid="11111111-2222-3333-4444-555555555555")
    before = apiserver.create(theirs).raise_for_error()
    applied = await apply(kube, Desired(child("ssa-r5")), probably_new=True)
    assert applied.outcome is Outcome.CONFLICT
    assert apiserver.get(theirs).raise_for_error() == before
