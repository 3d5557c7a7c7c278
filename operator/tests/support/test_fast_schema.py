"""The quick check (jsonschema-rs) says yes only where `jsonschema` finds no error: each case
is asked of both, and the admission's errors are those `jsonschema` gives."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pure.kuberay import rayjob_errors
from support.crd_schema import _FORMAT_CHECKS, _FORMATS, CRDValidator, _Validator, to_json_schema
from support.fast_schema import quick_validator

MAP_LIST = {
    "type": "array",
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
    "items": {"type": "object", "properties": {"name": {"type": "string"}}},
}
CASES: list[tuple[dict[str, Any], Any, bool]] = [
    ({"type": "string", "format": "date-time"}, "2026-01-01T00:00:00Z", True),
    ({"type": "string", "format": "date-time"}, "yesterday", False),
    ({"type": "string", "format": "byte"}, "aGVsbG8=", True),
    ({"type": "string", "format": "byte"}, "not base64!", False),
    ({"x-kubernetes-int-or-string": True}, "50%", True),
    ({"x-kubernetes-int-or-string": True}, True, False),
    ({"type": "integer", "minimum": 0, "exclusiveMinimum": True}, 0, False),
    ({"type": "string", "enum": ["a"], "nullable": True}, None, True),
    ({"type": "string", "enum": ["a"]}, "b", False),
    (
        {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        ["x", "x"],
        False,
    ),
    (MAP_LIST, [{"name": "a"}, {"name": "b"}], True),
    (MAP_LIST, [{"name": "a"}, {"name": "a"}], False),
    ({"type": "object", "x-kubernetes-embedded-resource": True}, {"apiVersion": "v1"}, False),
    ({"type": "string", "pattern": "^[a-z]+$"}, "abc", True),
    ({"type": "string", "pattern": "^[a-z]+$"}, "aBc", False),
    ({"type": "integer"}, 1.5, False),
]


@pytest.mark.parametrize(("node", "instance", "valid"), CASES)
def test_the_quick_check_agrees_with_jsonschema(
    node: dict[str, Any], instance: Any, valid: bool
) -> None:
    json_schema = to_json_schema(node)
    is_valid = quick_validator(json_schema, _FORMAT_CHECKS)
    assert is_valid is not None
    errors = list(_Validator(json_schema, format_checker=_FORMATS).iter_errors(instance))
    assert (errors == []) is valid
    assert is_valid(instance) is valid


def test_kuberay_rayjobs_errors_come_from_jsonschema() -> None:
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "j"},
        "spec": {
            "entrypoint": "python -c pass",
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "ray-head",
                                    "image": "ray",
                                    "ports": [{"containerPort": 6379}],
                                }
                            ]
                        }
                    },
                }
            },
        },
    }
    assert rayjob_errors(rayjob) == []
    broken = copy.deepcopy(rayjob)
    container = broken["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][
        0
    ]
    container["ports"][0]["containerPort"] = "6379"
    path = "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].ports[0].containerPort"
    assert rayjob_errors(broken) == [f'{path}: Invalid value: "6379": must be of type integer']


def test_a_schema_the_quick_check_cannot_compile_is_left_to_jsonschema() -> None:
    node = {
        "type": "object",
        "properties": {"name": {"type": "string", "pattern": r"^[a-z]+\Z"}},  # Python only
    }
    assert quick_validator(to_json_schema(node), _FORMAT_CHECKS) is None
    assert CRDValidator(node).validate({"name": "abc"}) == []
    assert CRDValidator(node).validate({"name": "ABC"}) == [
        "name: Invalid value: \"ABC\": 'ABC' does not match '^[a-z]+\\\\Z'"
    ]
