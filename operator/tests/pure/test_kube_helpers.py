"""The pure parts of `kube.apply`: what counts as a difference, and fields others own."""

from __future__ import annotations

from typing import Any

import pytest

from rlhf_operator.kube.apply import _copy_paths, _without, desired_hash, is_subset
from rlhf_operator.kube.client import object_path


@pytest.mark.parametrize(
    ("want", "have", "same"),
    [
        ({"a": 1}, {"a": 1, "b": 2}, True),  # server defaults are not differences
        ({"a": {"b": 1}}, {"a": {"b": 1, "c": 0}}, True),
        ({"a": 1}, {"a": 2}, False),
        ({"a": 1}, {}, False),
        ([{"n": 1}], [{"n": 1, "d": 0}], True),
        ([{"n": 1}], [{"n": 1}, {"n": 2}], False),  # a list is compared item by item
        ({"s": "1"}, {"s": 1}, False),
    ],
    ids=[
        "default-added",
        "nested-default",
        "changed",
        "missing",
        "list-defaults",
        "list-length",
        "type",
    ],
)
def test_is_subset(want: Any, have: Any, same: bool) -> None:
    assert is_subset(want, have) is same


def test_preserved_fields_are_neither_compared_nor_overwritten() -> None:
    ours = {"spec": {"suspend": True, "entrypoint": "x"}}
    theirs = {"spec": {"suspend": False, "entrypoint": "x"}}
    path = (("spec", "suspend"),)
    assert desired_hash(_without(ours, path)) == desired_hash(_without(theirs, path))
    body = _without(ours, path)
    _copy_paths(theirs, body, path)
    assert body == {"spec": {"suspend": False, "entrypoint": "x"}}
    assert ours["spec"]["suspend"] is True  # inputs are not mutated


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
