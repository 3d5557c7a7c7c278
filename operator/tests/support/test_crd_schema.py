"""CRD openAPIV3Schema -> JSON Schema translation, pruning and defaulting, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from support.crd_schema import CRDValidator, apply_defaults, field_path, prune, to_json_schema


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({"type": "string", "nullable": True}, {"type": ["string", "null"]}),
        (
            {"type": "string", "enum": ["a"], "nullable": True},
            {"type": ["string", "null"], "enum": ["a", None]},
        ),
        (
            {"x-kubernetes-int-or-string": True},
            {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        ),
        (
            {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
            {"type": "integer", "exclusiveMinimum": 0},
        ),
        (
            {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            {"type": "array", "uniqueItems": True, "items": {"type": "string"}},
        ),
        (
            {"type": "object", "x-kubernetes-embedded-resource": True},
            {
                "type": "object",
                "required": ["apiVersion", "kind"],
                "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}},
            },
        ),
        (
            {
                "type": "object",
                "description": "dropped",
                "x-kubernetes-validations": [{"rule": "x"}],
            },
            {"type": "object"},
        ),
    ],
    ids=[
        "nullable",
        "nullable-enum",
        "int-or-string",
        "exclusive-minimum",
        "list-set",
        "embedded-resource",
        "cel-ignored",
    ],
)
def test_translation(node: dict[str, Any], expected: dict[str, Any]) -> None:
    assert to_json_schema(node) == expected


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "known": {"type": "string"},
                "withDefault": {"type": "integer", "default": 3},
                "nested": {
                    "type": "object",
                    "default": {},
                    "properties": {"inner": {"type": "string", "default": "x"}},
                },
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "map": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"a": {"type": "string"}},
                    },
                },
                "list": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"a": {"type": "string"}}},
                },
                "notNull": {"type": "string", "default": "d"},
            },
        },
    },
}


@pytest.mark.parametrize(
    ("spec", "kept", "removed"),
    [
        ({"known": "k", "typo": 1}, {"known": "k"}, ["spec.typo"]),
        ({"free": {"any": {"thing": 1}}}, {"free": {"any": {"thing": 1}}}, []),
        ({"map": {"k": {"a": "1", "b": "2"}}}, {"map": {"k": {"a": "1"}}}, ["spec.map.k.b"]),
        ({"list": [{"a": "1"}, {"z": 2}]}, {"list": [{"a": "1"}, {}]}, ["spec.list[1].z"]),
        ({"notNull": None}, {}, []),
    ],
    ids=["unknown-field", "preserve-unknown", "additional-properties", "list-items", "null"],
)
def test_pruning(spec: dict[str, Any], kept: dict[str, Any], removed: list[str]) -> None:
    obj = {
        "apiVersion": "x/v1",
        "kind": "X",
        "metadata": {"name": "n", "labels": {"a": "b"}},
        "spec": spec,
    }
    pruned, paths = prune(obj, SCHEMA)
    assert pruned["spec"] == kept and paths == removed
    assert pruned["metadata"] == {"name": "n", "labels": {"a": "b"}}  # root metadata is kept


def test_defaults_fill_absent_fields_recursively() -> None:
    assert apply_defaults({"spec": {"nested": {}}}, SCHEMA)["spec"] == {
        "nested": {"inner": "x"},
        "withDefault": 3,
        "notNull": "d",
    }
    assert apply_defaults({"spec": {"withDefault": 7}}, SCHEMA)["spec"]["withDefault"] == 7


def test_validate_is_pure_and_strict_reports_unknown_fields() -> None:
    obj = {"spec": {"known": 1, "typo": True}}
    assert CRDValidator(SCHEMA, strict=True).validate(obj) == [
        "spec.typo: unknown field",
        "spec.known: Invalid value: 1: must be of type string",
    ]
    assert CRDValidator(SCHEMA).validate(obj) == [
        "spec.known: Invalid value: 1: must be of type string"
    ]
    assert obj == {"spec": {"known": 1, "typo": True}}


def test_date_time_format_is_checked() -> None:
    schema = {"type": "object", "properties": {"t": {"type": "string", "format": "date-time"}}}
    assert CRDValidator(schema).validate({"t": "2026-01-01T00:00:00Z"}) == []
    assert CRDValidator(schema).validate({"t": "yesterday"}) == [
        "t: Invalid value: \"yesterday\": 'yesterday' is not a 'date-time'"
    ]


@pytest.mark.parametrize(("parts", "text"), [(("spec", "a", 0, "b"), "spec.a[0].b"), ((), "")])
def test_field_path(parts: tuple[str | int, ...], text: str) -> None:
    assert field_path(parts) == text
