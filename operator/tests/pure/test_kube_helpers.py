"""The pure parts of `kube.apply` and `kube.client`: fields others own, API paths."""

from __future__ import annotations

import pytest

from rlhf_operator.kube.apply import _with_live
from rlhf_operator.kube.client import object_path


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
