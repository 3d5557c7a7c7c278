"""Validate objects against a CRD's `openAPIV3Schema` the way kube-apiserver does, minus CEL.

The real apiextensions-apiserver handles a custom resource write in three steps; we mirror them:

1. **prune**: fields the structural schema does not declare are dropped (or, with
   `fieldValidation=Strict`, reported as `unknown field` errors).
   `x-kubernetes-preserve-unknown-fields` stops pruning below its node;
   `x-kubernetes-embedded-resource` keeps `apiVersion`/`kind`/`metadata`. Non-nullable fields
   holding `null` are dropped too (so a default can take over).
2. **default**: `default` values are filled in where a property is absent.
3. **validate**: the schema, translated to JSON Schema (draft 2020-12), is checked with
   `jsonschema`. Translations: `nullable` -> `null` allowed, `x-kubernetes-int-or-string` ->
   integer or string, OpenAPI 3.0 boolean `exclusiveMinimum/Maximum` -> numeric form,
   `x-kubernetes-list-type: set|map` -> uniqueness checks, formats `date-time` and `byte`.
   A valid object is told by `jsonschema-rs` first (`fast_schema`), in microseconds.

Not evaluated: `x-kubernetes-validations` (CEL rules). They need a CEL interpreter with Kubernetes'
extension libraries and transition rules (`oldSelf`); the real apiextensions-apiserver tier of this
project's tests checks them. Everything here is pure (no I/O) and never mutates its input.
"""

from __future__ import annotations

import ast
import base64
import binascii
import copy
import datetime
import json
import os
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
import jsonschema.validators
import yaml

from support.fast_schema import list_map_duplicates, quick_validator

JSON = dict[str, Any]

# Root-level fields every object has; the CRD schema may not constrain them (metadata is checked
# by the API server's own metadata validation instead), so they are never pruned at the root.
_ROOT_KEPT = ("apiVersion", "kind", "metadata")

# Keywords copied as-is into the JSON Schema (same meaning in OpenAPI v3.0 and draft 2020-12).
_PASSTHROUGH = (
    "type",
    "enum",
    "minimum",
    "maximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "required",
    "format",
)


@dataclass(frozen=True)
class FieldError:
    """One problem with one field, in kube-apiserver's `path: message` style."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def field_path(parts: Sequence[str | int]) -> str:
    """`("spec", "workers", 0, "name")` -> `spec.workers[0].name` (kube-apiserver's notation)."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


# --- translation to JSON Schema -------------------------------------------------------------


def to_json_schema(node: Mapping[str, Any]) -> JSON:
    """Translate one structural OpenAPI v3 schema node (and its children) to JSON Schema."""
    out: JSON = {key: copy.deepcopy(node[key]) for key in _PASSTHROUGH if key in node}
    if "properties" in node:
        out["properties"] = {k: to_json_schema(v) for k, v in node["properties"].items()}
    if "items" in node:
        out["items"] = to_json_schema(node["items"])
    additional = node.get("additionalProperties")
    if isinstance(additional, Mapping):
        out["additionalProperties"] = to_json_schema(additional)
    for combinator in ("allOf", "anyOf", "oneOf"):
        if combinator in node:
            out[combinator] = [to_json_schema(sub) for sub in node[combinator]]
    if "not" in node:
        out["not"] = to_json_schema(node["not"])
    # OpenAPI 3.0 expresses exclusive bounds as booleans next to minimum/maximum.
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if node.get(exclusive) is True and bound in node:
            out[exclusive] = out.pop(bound)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("x-kubernetes-embedded-resource"):
        out.setdefault("properties", {})
        out["properties"].setdefault("apiVersion", {"type": "string"})
        out["properties"].setdefault("kind", {"type": "string"})
        out["required"] = sorted({*out.get("required", []), "apiVersion", "kind"})
    list_type = node.get("x-kubernetes-list-type")
    if list_type == "set":
        out["uniqueItems"] = True
    elif list_type == "map" and node.get("x-kubernetes-list-map-keys"):
        out["x-list-map-keys"] = list(node["x-kubernetes-list-map-keys"])
    if node.get("nullable"):
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        if "anyOf" in out and node.get("x-kubernetes-int-or-string"):
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out


def _list_map_keys(
    validator: Any, keys: list[str], instance: Any, schema: JSON
) -> Iterator[jsonschema.ValidationError]:
    """`x-kubernetes-list-type: map`: no two items may share the same values of the map keys."""
    for index in list_map_duplicates(instance, keys):
        shown = {key: instance[index].get(key) for key in keys}
        yield jsonschema.ValidationError(f"Duplicate value: {json.dumps(shown)}", path=(index,))


_FORMATS = jsonschema.FormatChecker(formats=())


def _is_date_time(value: object) -> bool:
    if isinstance(value, str):
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    return True


def _is_base64(value: object) -> bool:
    if isinstance(value, str):
        base64.b64decode(value, validate=True)
    return True


# Each format's check and what it raises on a bad value (for both validators).
_FORMAT_CHECKS: dict[str, tuple[Any, tuple[type[Exception], ...]]] = {
    "date-time": (_is_date_time, (ValueError,)),
    "byte": (_is_base64, (binascii.Error, ValueError)),
}
for _name, (_check, _raises) in _FORMAT_CHECKS.items():
    _FORMATS.checks(_name, raises=_raises)(_check)

_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, validators={"x-list-map-keys": _list_map_keys}
)


# --- pruning, null-dropping and defaulting --------------------------------------------------


def _preserves_unknown(node: Mapping[str, Any]) -> bool:
    return bool(node.get("x-kubernetes-preserve-unknown-fields"))


def prune(
    value: Any, node: Mapping[str, Any], path: tuple[str | int, ...] = (), *, root: bool = True
) -> tuple[Any, list[str]]:
    """Return a copy of `value` without undeclared fields, and the paths of what was removed.

    Non-nullable `null` fields are dropped silently (the real server does the same before
    defaulting); they are not "unknown", so they are not reported.
    """
    removed: list[str] = []
    result = _prune(value, node, path, removed, root=root)
    return result, removed


def _prune(
    value: Any, node: Mapping[str, Any], path: tuple[str | int, ...], removed: list[str], root: bool
) -> Any:
    if isinstance(value, list):
        items = node.get("items")
        if not isinstance(items, Mapping):
            return copy.deepcopy(value)
        return [_prune(v, items, (*path, i), removed, False) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    properties: Mapping[str, Any] = node.get("properties", {})
    additional = node.get("additionalProperties")
    embedded = bool(node.get("x-kubernetes-embedded-resource"))
    out: JSON = {}
    for key, child in value.items():
        child_path = (*path, key)
        # Embedded resources keep apiVersion/kind/metadata even when the schema omits them.
        kept_by_kubernetes = (root and key in _ROOT_KEPT) or (
            embedded and key in _ROOT_KEPT and key not in properties
        )
        if kept_by_kubernetes:
            out[key] = copy.deepcopy(child)
        elif key in properties:
            child_node = properties[key]
            if child is None and not child_node.get("nullable"):
                continue  # non-nullable null: dropped, a default may fill it in
            out[key] = _prune(child, child_node, child_path, removed, False)
        elif isinstance(additional, Mapping):
            if child is None and not additional.get("nullable"):
                continue
            out[key] = _prune(child, additional, child_path, removed, False)
        elif additional is True or _preserves_unknown(node):
            out[key] = copy.deepcopy(child)
        else:
            removed.append(field_path(child_path))
    return out


def apply_defaults(value: Any, node: Mapping[str, Any]) -> Any:
    """Return a copy of `value` with the schema's `default`s filled in where fields are absent."""
    if isinstance(value, list):
        items = node.get("items")
        if isinstance(items, Mapping):
            return [apply_defaults(v, items) for v in value]
        return copy.deepcopy(value)
    if not isinstance(value, dict):
        return value
    out: JSON = {}
    properties: Mapping[str, Any] = node.get("properties", {})
    additional = node.get("additionalProperties")
    for key, child in value.items():
        child_node = properties.get(key, additional if isinstance(additional, Mapping) else None)
        out[key] = apply_defaults(child, child_node) if child_node else copy.deepcopy(child)
    for key, child_node in properties.items():
        if key not in out and "default" in child_node:
            # A default object is itself defaulted, as the real server does.
            out[key] = apply_defaults(copy.deepcopy(child_node["default"]), child_node)
    return out


# --- error messages -------------------------------------------------------------------------


def _describe(error: jsonschema.ValidationError, prefix: Sequence[str] = ()) -> FieldError:
    path = [*prefix, *error.absolute_path]
    shown = json.dumps(error.instance, default=str)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if error.validator == "required":
        missing = ast.literal_eval(error.message.split(" is a required property")[0])
        return FieldError(field_path([*path, missing]), "Required value")
    if error.validator == "type":
        wanted = error.validator_value
        wanted_text = " or ".join(wanted) if isinstance(wanted, list) else wanted
        return FieldError(
            field_path(path), f"Invalid value: {shown}: must be of type {wanted_text}"
        )
    if error.validator == "enum":
        allowed = ", ".join(json.dumps(v) for v in error.validator_value)
        return FieldError(
            field_path(path), f"Unsupported value: {shown}: supported values: {allowed}"
        )
    if error.validator == "uniqueItems" and isinstance(error.instance, list):
        seen: list[Any] = []
        for index, item in enumerate(error.instance):
            if item in seen:
                duplicate = f"Duplicate value: {json.dumps(item)}"
                return FieldError(field_path([*path, index]), duplicate)
            seen.append(item)
    if error.validator == "x-list-map-keys":
        return FieldError(field_path(path), error.message)
    return FieldError(field_path(path), f"Invalid value: {shown}: {error.message}")


# --- the public entry point -----------------------------------------------------------------


def version_schema(crd: Mapping[str, Any], version: str) -> JSON:
    """The `openAPIV3Schema` of one version of a CRD; KeyError names what is missing."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema = entry.get("schema", {}).get("openAPIV3Schema")
            if schema is None:
                raise KeyError(f"CRD {crd['metadata']['name']} version {version} has no schema")
            return dict(schema)
    names = [entry["name"] for entry in crd["spec"]["versions"]]
    raise KeyError(f"CRD {crd['metadata']['name']} has no version {version!r}; it has {names}")


# Root keywords the incremental admission understands; any other one means "validate it all".
_SPLITTABLE_ROOT = {"type", "properties", "required", "description", "title"}


class CRDValidator:
    """Admission of objects of one CRD version: prune, default, validate (no CEL, see module)."""

    def __init__(self, schema: Mapping[str, Any], *, strict: bool = False) -> None:
        self.schema = schema
        self.strict = strict
        json_schema = to_json_schema(schema)
        self._validator = _Validator(json_schema, format_checker=_FORMATS)
        self._is_valid = quick_validator(json_schema, _FORMAT_CHECKS)
        self._field_validators: dict[str, tuple[Any, Any]] = {}
        self._splittable = set(schema) <= _SPLITTABLE_ROOT

    def admit(
        self, obj: Mapping[str, Any], previous: Mapping[str, Any] | None = None
    ) -> tuple[JSON, list[str], list[FieldError]]:
        """What the API server would store: (pruned+defaulted object, pruned paths, errors).

        In strict mode pruned fields are errors (`unknown field`), as with `fieldValidation=Strict`.
        `previous` (an object admitted before, e.g. the stored one an update replaces) makes
        admission incremental: top-level fields equal to it are kept as they are, unchecked,
        and shared with the result. That is what makes status and metadata writes cheap.
        """
        if previous is None or not self._splittable:
            pruned, removed = prune(obj, self.schema)
            defaulted = apply_defaults(pruned, self.schema)
            errors = self.schema_errors(defaulted)
        else:
            defaulted, removed, errors = self._admit_changed_fields(obj, previous)
        if self.strict:
            errors = [FieldError(path, "unknown field") for path in removed] + errors
        return defaulted, removed, errors

    def _admit_changed_fields(
        self, obj: Mapping[str, Any], previous: Mapping[str, Any]
    ) -> tuple[JSON, list[str], list[FieldError]]:
        properties: Mapping[str, Any] = self.schema.get("properties", {})
        out: JSON = {}
        removed: list[str] = []
        errors: list[FieldError] = []
        for key, value in obj.items():
            if key in _ROOT_KEPT or (key in previous and previous[key] == value):
                out[key] = value
            elif key not in properties:
                removed.append(key)
            elif value is not None or properties[key].get("nullable"):
                node = properties[key]
                pruned, dropped = prune(value, node, (key,), root=False)
                out[key] = apply_defaults(pruned, node)
                removed += dropped
                errors += self._field_errors(key, out[key])
        for key, node in properties.items():
            if key not in out and "default" in node:
                out[key] = apply_defaults(copy.deepcopy(node["default"]), node)
                errors += self._field_errors(key, out[key])
        errors += [
            FieldError(key, "Required value")
            for key in self.schema.get("required", [])
            if key not in out
        ]
        return out, removed, sorted(errors, key=lambda e: (e.path, e.message))

    def _field_errors(self, key: str, value: Any) -> list[FieldError]:
        if key not in self._field_validators:
            node = to_json_schema(self.schema["properties"][key])
            validator = _Validator(node, format_checker=_FORMATS)
            self._field_validators[key] = (validator, quick_validator(node, _FORMAT_CHECKS))
        validator, is_valid = self._field_validators[key]
        if is_valid is not None and is_valid(value):
            return []
        return [_describe(e, (key,)) for e in validator.iter_errors(value)]

    def schema_errors(self, obj: Any) -> list[FieldError]:
        """Schema violations only (no pruning, no defaulting), sorted by field path. A quick
        check answers for a valid object (`fast_schema`); `jsonschema` finds the errors."""
        if self._is_valid is not None and self._is_valid(obj):
            return []
        found = [_describe(e) for e in self._validator.iter_errors(obj)]
        return sorted(found, key=lambda e: (e.path, e.message))

    def validate(self, obj: Mapping[str, Any]) -> list[str]:
        """Field-path error messages, empty when the object would be accepted."""
        return [str(error) for error in self.admit(obj)[2]]


def validator_for_crd(
    crd: Mapping[str, Any], version: str, *, strict: bool = False
) -> CRDValidator:
    """A validator for `version` of the CRD given as a dict (as loaded from its YAML)."""
    return CRDValidator(version_schema(crd, version), strict=strict)


def load_yaml_documents(path: str | os.PathLike[str]) -> list[JSON]:
    """All YAML documents of a file (libyaml's C loader: KubeRay's CRDs are 1-1.4 MB each)."""
    text = pathlib.Path(path).read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(text, Loader=loader) if doc]
