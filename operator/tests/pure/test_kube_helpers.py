"""The pure parts of `kube.apply` and `kube.client`: fields others own, API paths."""

from __future__ import annotations

from typing import Any

import pytest

from rlhf_operator.kube.apply import _with_live
from rlhf_operator.kube.client import object_path
from rlhf_operator.kube.takeover import merged_fields, taken_over


def test_fields_others_own_are_applied_with_their_live_value_under_a_precondition() -> None:
    ours = {"metadata": {"name": "x"}, "spec": {"suspend": True, "entrypoint": "x"}}
    live = {"metadata": {"name": "x", "resourceVersion": "7"}, "spec": {"suspend": False}}
    body = _with_live(ours, live, (("spec", "suspend"),))
    assert body == {
        "metadata": {"name": "x", "resourceVersion": "7"},  # a change since: 409, not a revert
        "spec": {"suspend": False, "entrypoint": "x"},
    }
    assert ours["spec"]["suspend"] is True  # inputs are not mutated
    gone = _with_live(ours, {"metadata": {"resourceVersion": "8"}}, (("spec", "suspend"),))
    assert "suspend" not in gone["spec"]  # not set live: not applied either


@pytest.mark.parametrize(
    ("api_version", "kind", "path"),
    [
        ("v1", "ConfigMap", "/api/v1/namespaces/ns/configmaps/x"),
        ("ray.io/v1", "RayJob", "/apis/ray.io/v1/namespaces/ns/rayjobs/x"),
        (
            "rbac.authorization.k8s.io/v1",
            "Role",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/x",
        ),
        ("rlhf.dev/v1alpha1", "RLHFJob", "/apis/rlhf.dev/v1alpha1/namespaces/ns/rlhfjobs/x"),
    ],
)
def test_object_paths(api_version: str, kind: str, path: str) -> None:
    assert object_path(api_version, kind, "ns", "x") == path


def test_unknown_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="no API path known for apps/v1 Deployment"):
        object_path("apps/v1", "Deployment", "ns", "x")


def _entry(manager: str, operation: str, fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": "ray.io/v1",
        "time": "2026-12-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        **extra,
    }


def test_field_sets_are_merged_as_a_union() -> None:
    a = {"f:metadata": {"f:labels": {".": {}, "f:a": {}}}, "f:spec": {"f:x": {}}}
    b = {"f:metadata": {"f:labels": {"f:b": {}}, "f:annotations": {"f:h": {}}}}
    assert merged_fields(a, b) == {
        "f:metadata": {"f:labels": {".": {}, "f:a": {}, "f:b": {}}, "f:annotations": {"f:h": {}}},
        "f:spec": {"f:x": {}},
    }


def test_our_update_entries_are_folded_into_our_apply_entry() -> None:
    old = _entry("rlhf-operator", "Update", {"f:spec": {"f:deadline": {}, "f:x": {}}})
    kueue = _entry("kueue", "Update", {"f:spec": {"f:suspend": {}}})
    status = _entry("rlhf-operator", "Update", {"f:status": {}}, subresource="status")
    ours = _entry("rlhf-operator", "Apply", {"f:spec": {"f:x": {}, "f:y": {}}})
    managed = taken_over([old, kueue, status, ours])
    assert managed == [
        kueue,
        status,  # a subresource's entry is not the object's
        {**ours, "fieldsV1": {"f:spec": {"f:x": {}, "f:y": {}, "f:deadline": {}}}},
    ]
    # No Apply entry yet: the Update entry becomes it.
    assert taken_over([old, kueue]) == [kueue, {**old, "operation": "Apply"}]
    # Nothing of ours by update: nothing to do.
    assert taken_over([kueue, ours]) is None
