"""Property test over every string, number, map and list field of an RLHFJob spec: hypothesis
writes hostile values into the field of a valid manifest, and the spec is either refused with
lines that name fields (a hostile string: this field or a section holding it), or rendered with
every pod inside Pod Security "restricted", the hostile string only in inert data (the job
ConfigMap's data, an env var's value), and YAML that reads back as the rendered objects."""

from __future__ import annotations

import enum
import itertools
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from corpus import base_manifest
from rlhf_operator.render import render_file, to_yaml
from rlhf_operator.settings import OperatorSettings
from rlhf_trainer.config import JobSpec
from rlhf_trainer.config.documents import parse_documents
from support.pod_security import violations
from test_hostile_corpus import _inert_only, _pods

SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")

# Pieces that break out of a shell line, a YAML document, a label, a path or a template.
HOSTILE_BITS = [
    "; touch /tmp/pwned #",
    "\nkind: Pod",
    "$(id)",
    "`id`",
    "../..",
    " a b ",
    "\"'",
    "\\",
    "{{7*7}}",
    "\n---\n",
    "\u202e",
    "\t",
    "*alias &anchor !!python/object",
    "x" * 300,
]
hostile_strings = st.builds(
    lambda bit, text: f"zq{text}{bit}",
    st.sampled_from(HOSTILE_BITS),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20),
)
hostile_ints = st.one_of(
    st.sampled_from([-1, 0, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**30]),
    st.integers(min_value=-(10**6), max_value=10**6),
)
hostile_floats = st.one_of(
    st.sampled_from([float("inf"), float("-inf"), float("nan"), -0.0, 1e308, -1e308, 5e-324]),
    st.floats(allow_nan=False, allow_infinity=False),
)
hostile_maps = st.dictionaries(hostile_strings, hostile_strings, min_size=1, max_size=4)
hostile_lists = st.lists(hostile_strings, min_size=1, max_size=40)

Leaf = tuple[str, str]  # (dotted camelCase path under spec, kind)


def _unwrap(annotation: Any) -> Any:
    """`X | None` -> X; Annotated[X, ...] -> X."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _leaves(model: type[BaseModel], prefix: str) -> Iterator[Leaf]:
    for name, info in model.model_fields.items():
        path = f"{prefix}.{info.alias or name}"
        kind = _unwrap(info.annotation)
        origin = typing.get_origin(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from _leaves(kind, path)
        elif origin is list:
            (item,) = typing.get_args(kind)
            item = _unwrap(item)
            yield (path, "list")
            if isinstance(item, type) and issubclass(item, BaseModel):
                yield from _leaves(item, f"{path}[0]")
        elif origin is dict:
            yield (path, "map")
        elif isinstance(kind, type) and issubclass(kind, bool | enum.Enum):
            continue
        elif kind is str:
            yield (path, "string")
        elif kind is int:
            yield (path, "int")
        elif kind is float:
            yield (path, "float")


LEAVES = sorted(set(_leaves(JobSpec, "spec")))
STRATEGY = {
    "string": hostile_strings,
    "int": hostile_ints,
    "float": hostile_floats,
    "map": hostile_maps,
    "list": hostile_lists,
}


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    """Write `value` at a dotted path (`a.b[0].c`), creating what is missing."""
    parts = path.replace("[0]", ".[0]").split(".")
    node: Any = doc
    for part, nxt in itertools.pairwise(parts):
        child = {} if nxt != "[0]" else []
        if part == "[0]":
            if not node:
                node.append(child)
            node = node[0]
        else:
            if not isinstance(node.get(part), dict | list):
                node[part] = child
            node = node[part]
    if parts[-1] == "[0]":
        node[:1] = [value]
    else:
        node[parts[-1]] = value


def test_every_kind_of_field_is_covered() -> None:
    kinds = {kind for _, kind in LEAVES}
    assert kinds == set(STRATEGY), kinds
    assert len(LEAVES) > 150


@pytest.mark.parametrize(("path", "kind"), LEAVES, ids=[p for p, _ in LEAVES])
def test_hostile_values_are_refused_or_inert(path: str, kind: str, tmp_path: Path) -> None:
    @settings(
        max_examples=5,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(value=STRATEGY[kind])
    def check(value: Any) -> None:
        manifest = base_manifest()
        _set(manifest, path, value)
        file = tmp_path / "job.yaml"
        file.write_text(yaml.safe_dump(manifest, width=10**9, allow_unicode=True))
        (rendered,) = render_file(file, SETTINGS)
        hostile = [value] if isinstance(value, str) else []
        hostile += list(value.values()) + list(value) if isinstance(value, dict) else []
        hostile += value if isinstance(value, list) else []
        if not rendered.objects:
            assert rendered.problems
            assert all(len(p) < 1000 for p in rendered.problems)
            # Every line names a field: this one, a section holding it, or (a cross-field
            # rule, a required neighbour) another field of the spec.
            assert all(p.startswith(("spec.", "spec:")) for p in rendered.problems)
            return
        for text in hostile:
            places = _inert_only(rendered.objects, text)
            # A trainer image that its validation (an image reference: no space, quote or
            # newline) took, however long ("zq" + 300 x), is every container's image.
            if path == "spec.image":
                places = [p for p in places if not p.endswith(".image")]
            assert places == [], (text, path)
        ray_job = next(o for o in rendered.objects if o["kind"] == "RayJob")
        for pod in _pods(ray_job):
            assert violations(pod["spec"], pod.get("metadata", {}).get("annotations")) == []
        assert parse_documents(to_yaml(rendered.objects)) == rendered.objects

    check()
