"""The committed CRD is exactly what the models generate, and it is structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rlhf_operator.crd.generate import (
    CRD_FILE,
    PIPELINE_CRD_FILE,
    build_crd,
    build_pipeline_crd,
    render_crd_yaml,
    render_pipeline_crd_yaml,
)
from rlhf_operator.crd.rules import RULES

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "crds" / CRD_FILE


def _schema() -> dict[str, Any]:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def _walk(node: Any, path: str = ""):  # type: ignore[no-untyped-def]
    if isinstance(node, dict):
        yield path, node
        for key in ("properties",):
            for name, child in node.get(key, {}).items():
                yield from _walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            yield from _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_committed_crd_matches_the_models() -> None:
    assert COMMITTED.exists(), "run `rlhf-operator crd` and commit crds/"
    assert COMMITTED.read_text() == render_crd_yaml(), (
        "crds/ drifted from the pydantic models: run `rlhf-operator crd` and commit the result"
    )


def test_schema_is_structural() -> None:
    for path, node in _walk(_schema()):
        assert "type" in node, f"{path or '<root>'} has no type"
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "$defs", "title", "prefixItems"):
            assert banned not in node, f"{path}: {banned} is not structural"
        assert not ("properties" in node and "additionalProperties" in node), path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(bound, True), bool), f"{path}: {bound} must be a boolean"
        assert node.get("default", 0) is not None, f"{path}: null default"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("spec.algorithm.name", {"type": "string"}),
        ("spec.rollout.samplesPerPrompt", {"type": "integer", "default": 1, "minimum": 1}),
        ("spec.rollout.topP", {"type": "number", "exclusiveMinimum": True, "minimum": 0}),
        ("spec.training.zeroStage", {"type": "integer", "maximum": 3}),
        ("spec.models.critic", {"type": "object", "nullable": True}),
        ("spec.rollout", {"type": "object", "default": {}}),
        ("spec.placement.nodeSelector", {"type": "object"}),
        ("spec.training.adamBetas", {"type": "array", "minItems": 2, "maxItems": 2}),
        ("spec.algorithm.lambda", {"type": "number", "default": 0.95}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_schema_nodes(path: str, expected: dict[str, Any]) -> None:
    node = _schema()
    for part in path.split("."):
        node = node["properties"][part]
    for key, value in expected.items():
        assert node.get(key) == value, (path, key, node.get(key))


def test_every_cel_rule_is_attached() -> None:
    attached = {p: n.get("x-kubernetes-validations") for p, n in _walk(_schema())}
    for path, rules in RULES.items():
        key = "." + path if path else ""
        assert attached.get(key) == [dict(r) for r in rules], path


def test_crd_metadata() -> None:
    crd = build_crd()
    names = crd["spec"]["names"]
    assert crd["metadata"]["name"] == "rlhfjobs.rlhf.dev"
    assert names["shortNames"] == ["rlhf"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Phase", "Algorithm", "Progress", "Reward", "GPUs", "Restarts", "Age"]
    assert yaml.safe_load(render_crd_yaml()) == crd


def test_no_category_shadows_a_name_kubectl_is_given() -> None:
    """kubectl expands a category before a short name: a category that equals a name of
    either kind makes `kubectl get rlhf -w` and `kubectl describe rlhf NAME` refuse to run."""
    names = [build_crd()["spec"]["names"], build_pipeline_crd()["spec"]["names"]]
    typed = {n[key] for n in names for key in ("plural", "singular")}
    typed |= {short for n in names for short in n["shortNames"]}
    typed |= {n["kind"].lower() for n in names}
    categories = {c for n in names for c in n["categories"]}
    assert not categories & typed
    assert names[0]["categories"] == names[1]["categories"]  # one word lists both kinds


def test_pipeline_crd_is_committed_structural_and_named() -> None:
    committed = REPO / "crds" / PIPELINE_CRD_FILE
    assert committed.read_text() == render_pipeline_crd_yaml(), "run `rlhf-operator crd`"
    crd = build_pipeline_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "type" in node, f"{path or '<root>'} has no type"
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "$defs", "title"):
            assert banned not in node, f"{path}: {banned} is not structural"
    assert crd["metadata"]["name"] == "rlhfpipelines.rlhf.dev"
    assert crd["spec"]["names"]["shortNames"] == ["rlhfp"]
    version = crd["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Phase",
        "Stages",
        "Message",
        "Age",
    ]
    stage_spec = schema["properties"]["spec"]["properties"]["stages"]["items"]["properties"]["spec"]
    actor = stage_spec["properties"]["models"]["properties"]["actor"]
    assert {"fromStage", "fromJob", "pretrained"} <= set(actor["properties"])
    assert actor["x-kubernetes-validations"][0]["message"].startswith("set exactly one of")
