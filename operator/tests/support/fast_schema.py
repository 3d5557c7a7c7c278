r"""A quick yes for admission: `jsonschema-rs` (Rust) checks the translated schema first, and
only an object it refuses is walked by `jsonschema` for kube-apiserver-style errors.

Why: the emulator admits every create and update against its CRD's schema, and KubeRay's
RayJob schema (its pod templates) takes `jsonschema` ~3 ms an object, ~0.1 ms here; under
`bench/operator_scale.py` admission was two thirds of the emulator process's CPU (a cProfile
at 5,000 jobs), on the cores the operator under test needs. A real kube-apiserver validates
in compiled Go, so the cheaper stand-in is also the more faithful one.

Where the answers must agree: a "yes" here skips `jsonschema`, so this is at least as strict
in all the translation expresses: the same translated schema and `x-list-map-keys` keyword,
the project's two formats with the same checks, and jsonschema-rs's other built-in formats
on top (stricter, so only a detour through `jsonschema`, which then decides). One place it
may differ: `pattern`s are Rust regexes here, Python's there; where the two dialects read a
pattern differently (`[[:alpha:]]` is a POSIX class in Rust and in Go's RE2, a bracket set
in Python) the quick answer follows Rust, the nearer to kube-apiserver's. A pattern Rust
cannot compile (`\Z`, `a{,3}`) leaves the whole schema to `jsonschema`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema_rs

JSON = dict[str, Any]


def list_map_duplicates(instance: Any, keys: list[str]) -> Iterator[int]:
    """`x-kubernetes-list-type: map`: the index of each item whose map keys repeat an earlier
    item's."""
    if not isinstance(instance, list):
        return
    seen: set[str] = set()
    for index, item in enumerate(instance):
        if isinstance(item, dict):
            identity = json.dumps([item.get(key) for key in keys])
            if identity in seen:
                yield index
            seen.add(identity)


class _ListMapKeys:
    """`x-list-map-keys` (the translation's name for the map keys), as jsonschema-rs runs it."""

    def __init__(self, parent_schema: JSON, value: list[str], schema_path: list[str | int]):
        self.keys = list(value)

    def validate(self, instance: Any) -> None:
        for index in list_map_duplicates(instance, self.keys):
            raise ValueError(f"item {index} repeats the list-map keys {self.keys}")


def _as_test(
    check: Callable[[Any], object], errors: tuple[type[Exception], ...]
) -> Callable[[str], bool]:
    """A format check that raises on a bad value, as jsonschema-rs wants it: True or False."""

    def test(value: str) -> bool:
        try:
            check(value)
        except errors:
            return False
        return True

    return test


FormatChecks = Mapping[str, tuple[Callable[[Any], object], tuple[type[Exception], ...]]]


def quick_validator(
    json_schema: Mapping[str, Any], formats: FormatChecks
) -> Callable[[Any], bool] | None:
    """`is_valid` of a jsonschema-rs validator of `json_schema` (a translated CRD schema), or
    None when it cannot be built. `formats` maps a format to (check, the exceptions it raises
    on a bad value), the same checks the `jsonschema` side uses."""
    try:
        validator = jsonschema_rs.validator_for(
            dict(json_schema),
            formats={name: _as_test(check, errors) for name, (check, errors) in formats.items()},
            validate_formats=True,
            keywords={"x-list-map-keys": _ListMapKeys},
        )
    except (ValueError, jsonschema_rs.ValidationError):
        return None
    return validator.is_valid
