"""Generate the RLHFJob and RLHFPipeline CustomResourceDefinitions from the pydantic models.

pydantic emits JSON Schema (draft 2020-12, `$ref`/`anyOf`); Kubernetes wants a *structural*
OpenAPI v3 schema: every node typed, no `$ref`, no `anyOf` for optionals (`nullable`
instead), `additionalProperties` only for maps, exclusive bounds as booleans. The models stay
the single source of truth; `crds/rlhf.dev_rlhfjobs.yaml` and `crds/rlhf.dev_rlhfpipelines.yaml`
are this module's output, committed, and a test fails when they drift apart.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from rlhf_trainer.config import JobSpec
from rlhf_trainer.config.pipeline import PIPELINE_KIND, PipelineSpec

from ..api.v1alpha1 import GROUP, KIND, LIST_KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from ..api.v1alpha1.pipeline import (
    PIPELINE_LIST_KIND,
    PIPELINE_PLURAL,
    PIPELINE_SHORT_NAMES,
    PIPELINE_SINGULAR,
    RLHFPipelineStatus,
)
from ..api.v1alpha1.status import RLHFJobStatus
from ..api.v1alpha1.types import CATEGORIES
from .rules import PIPELINE_RULES, RULES

Schema = dict[str, Any]

CRD_FILE = f"{GROUP}_{PLURAL}.yaml"
PIPELINE_CRD_FILE = f"{GROUP}_{PIPELINE_PLURAL}.yaml"
# Keys of pydantic's output that carry no meaning for the API server.
_DROPPED_KEYS = {"title", "$defs"}
_OPAQUE = "x-kubernetes-preserve-unknown-fields"

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Algorithm", "type": "string", "jsonPath": ".spec.algorithm.name"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.trainer.progress"},
    {"name": "Reward", "type": "number", "jsonPath": ".status.trainer.reward"},
    {"name": "GPUs", "type": "integer", "jsonPath": ".status.totalGpus"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
PIPELINE_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Stages", "type": "string", "jsonPath": ".status.progress"},
    {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _resolve(node: Any, defs: dict[str, Schema]) -> Any:
    """Inline every `$ref` (our models are not recursive)."""
    if isinstance(node, list):
        return [_resolve(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _resolve({**target, **extra}, defs)
    return {k: _resolve(v, defs) for k, v in node.items()}


def _structural(node: Schema) -> Schema:
    """Rewrite one resolved JSON Schema node (and its children) into structural OpenAPI v3."""
    node = {k: v for k, v in node.items() if k not in _DROPPED_KEYS}
    if node.get(_OPAQUE):
        # A field whose model the API server cannot express (a union of object types, such as
        # an OpenAI grader): an object kept as written; the operator validates it with the
        # pydantic model, naming the field, before anything runs.
        opaque: Schema = {"type": "object", _OPAQUE: True}
        if "description" in node:
            opaque["description"] = node["description"]
        return _ordered(opaque)
    nullable = False
    if "anyOf" in node:
        branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
        nullable = len(branches) == 1
        if len(branches) != 1:
            raise ValueError(f"cannot express a union of {len(branches)} types structurally")
        node = {**branches[0], **node}
        node = {k: v for k, v in node.items() if k not in _DROPPED_KEYS}
    if node.get("default", ...) is None:
        # Optional fields are simply absent; an explicit null default would be stored.
        del node["default"]
    for bound, inclusive, op in (
        ("exclusiveMinimum", "minimum", ">"),
        ("exclusiveMaximum", "maximum", "<"),
    ):
        value = node.get(bound)
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        node[inclusive] = node.pop(bound)
        if float(value).is_integer():
            node[bound] = True
        else:
            # The API server truncates a fractional exclusive bound when the value is an
            # integer (0 fails `< 0.5`, and a stored default 0.0 comes back as 0), so say it
            # in CEL, which compares numbers exactly, and keep the inclusive bound for docs.
            node.setdefault("x-kubernetes-validations", []).append(
                {"rule": f"self {op} {value}", "message": f"must be {op} {value}"}
            )
    if "patternProperties" in node:  # a map with constrained keys: values typed, keys by CEL
        node = _keys_by_cel(node)
    if "prefixItems" in node:  # fixed-size tuples, e.g. adamBetas
        items = node.pop("prefixItems")
        node["items"] = _structural(items[0])
        node["minItems"] = node["maxItems"] = len(items)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("type") == "object" or "properties" in node:
        node["type"] = "object"
        props = node.get("properties", {})
        required = set(node.get("required", []))
        out_props = {}
        for name, child in props.items():
            child_schema = _structural(child)
            # Sections whose every field has a default get `{}` so that the API server fills
            # them in (defaults apply only inside objects that exist).
            if (
                name not in required
                and child_schema.get("type") == "object"
                and "properties" in child_schema
                and "default" not in child_schema
                and not child_schema.get("nullable")
            ):
                child_schema["default"] = {}
            out_props[name] = child_schema
        if out_props:
            node["properties"] = out_props
            node.pop("additionalProperties", None)
        elif isinstance(node.get("additionalProperties"), dict):
            node["additionalProperties"] = _structural(node["additionalProperties"])
        if node.get("additionalProperties") is False:
            del node["additionalProperties"]
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        node["items"] = _structural(node["items"])
    if nullable:
        node["nullable"] = True
    return _ordered(node)


def _keys_by_cel(node: Schema) -> Schema:
    """pydantic says a dict's key constraints with `patternProperties` and `propertyNames`,
    which structural schemas forbid: the values become `additionalProperties`, the keys a CEL
    rule (the API server then refuses a bad key naming the map)."""
    (pattern, values), *more = node.pop("patternProperties").items()
    if more:
        raise ValueError("a map with more than one key pattern")
    names = node.pop("propertyNames", {})
    node["additionalProperties"] = values
    checks = []
    if "maxLength" in names:
        checks.append(f"size(k) <= {names['maxLength']}")
    if names.get("minLength", 0) > 0:
        checks.append(f"size(k) >= {names['minLength']}")
    checks.append(f"k.matches(r'{pattern}')")  # a raw string: CEL has no `\.` escape
    limit = f" of at most {names['maxLength']} characters" if "maxLength" in names else ""
    node.setdefault("x-kubernetes-validations", []).append(
        {
            "rule": f"self.all(k, {' && '.join(checks)})",
            "message": f"every key must match {pattern}{limit}",
        }
    )
    return node


_KEY_ORDER = ["type", "description", "nullable", "default", "enum"]


def _ordered(node: Schema) -> Schema:
    """Stable, readable key order: type and description first, children last."""
    head = [k for k in _KEY_ORDER if k in node]
    tail = [k for k in ("required", "properties", "items", "additionalProperties") if k in node]
    middle = sorted(k for k in node if k not in head and k not in tail)
    return {k: node[k] for k in head + middle + tail}


def model_schema(model: type[Any]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(_resolve(raw, raw.get("$defs", {})))


def _node_at(root: Schema, path: str) -> Schema:
    node = root
    for part in [p for p in path.split(".") if p]:
        is_list = part.endswith("[]")
        node = node["properties"][part.removesuffix("[]")]
        if is_list:
            node = node["items"]
    return node


def _root(description: str, spec: Schema, status: Schema, rules: dict[str, Any]) -> Schema:
    root: Schema = {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }
    for path, path_rules in rules.items():
        _node_at(root, path).setdefault("x-kubernetes-validations", []).extend(
            dict(r) for r in path_rules
        )
    return root


def openapi_schema() -> Schema:
    return _root(
        "RLHFJob runs RLHF post-training (PPO, GRPO, REINFORCE++, RLOO, DPO...)"
        " of a language model on a KubeRay cluster.",
        model_schema(JobSpec),
        model_schema(RLHFJobStatus),
        dict(RULES),
    )


def pipeline_openapi_schema() -> Schema:
    return _root(
        "RLHFPipeline runs a post-training recipe (e.g. SFT -> reward model -> PPO) as stages of"
        " RLHFJobs; a stage's model source may be an earlier stage's final model (fromStage).",
        model_schema(PipelineSpec),
        model_schema(RLHFPipelineStatus),
        dict(PIPELINE_RULES),
    )


def _crd(names: dict[str, Any], columns: list[dict[str, Any]], schema: Schema) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{names['plural']}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "rlhf-operator"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {**names, "categories": list(CATEGORIES)},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def build_crd() -> dict[str, Any]:
    names = _names(KIND, LIST_KIND, PLURAL, SINGULAR, SHORT_NAMES)
    return _crd(names, PRINTER_COLUMNS, openapi_schema())


def build_pipeline_crd() -> dict[str, Any]:
    names = _names(
        PIPELINE_KIND, PIPELINE_LIST_KIND, PIPELINE_PLURAL, PIPELINE_SINGULAR, PIPELINE_SHORT_NAMES
    )
    return _crd(names, PIPELINE_PRINTER_COLUMNS, pipeline_openapi_schema())


def _names(kind: str, list_kind: str, plural: str, singular: str, short: list[str]) -> Schema:
    keys = ("kind", "listKind", "plural", "singular", "shortNames")
    return dict(zip(keys, (kind, list_kind, plural, singular, list(short)), strict=True))


_HEADER = "# Generated by `rlhf-operator crd` from the pydantic models. Do not edit.\n"


def render_crd_yaml() -> str:
    return _HEADER + yaml.safe_dump(build_crd(), sort_keys=False, width=100)


def render_pipeline_crd_yaml() -> str:
    return _HEADER + yaml.safe_dump(build_pipeline_crd(), sort_keys=False, width=100)


def write_crd(out_dir: Path) -> list[Path]:
    """Write both CRDs into `out_dir`; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (
        (CRD_FILE, render_crd_yaml()),
        (PIPELINE_CRD_FILE, render_pipeline_crd_yaml()),
    ):
        path = out_dir / name
        path.write_text(text)
        written.append(path)
    return written
