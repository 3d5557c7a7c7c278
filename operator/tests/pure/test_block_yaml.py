"""`builders.block_yaml`: byte for byte PyYAML's block YAML, or None (then PyYAML writes it).

Held to PyYAML itself: random documents of the shapes a job config has, strings drawn from an
alphabet full of YAML's traps (indicators, quotes, spaces, words its loader reads as other
types, long lines), and every bundled example's `job.yaml` (which must take the fast path).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf_operator.builders.block_yaml import dump_block
from rlhf_operator.builders.configmap import pod_job_config, render_job_yaml
from rlhf_operator.reconcile.parse import parse
from rlhf_operator.settings import OperatorSettings

from .factories import job_body

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "manifests" / "examples"
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def pyyaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def assert_same_or_unsure(data: Any) -> bool:
    fast = dump_block(data)
    if fast is not None:
        assert fast == pyyaml(data)
    return fast is not None


TRAPS = [
    "",
    "-",
    "-a",
    "- a",
    ":",
    "a:",
    "a:b",
    "a: b",
    "@x",
    "x@y",
    "~",
    "~x",
    "=",
    "---",
    "...x",
    "yes",
    "No",
    "on",
    "OFF",
    "null",
    "Null",
    "true",
    "1",
    "-1",
    "+1",
    "0x1F",
    "0o7",
    "012",
    "1_000",
    "1:20",
    "1.5",
    "1e3",
    "1.0e-5",
    ".inf",
    ".NaN",
    "2026-12-06",
    "2026-12-06 04:00:00",
    "<<",
    "a b",
    "a  b",
    " a",
    "a ",
    "x #y",
    "a#b",
    "it's",
    '"q"',
    "{a}",
    "[1]",
    "a,b",
    "?x",
    "s3://bucket/key",
    "pvc://claim/path",
    "OpenRLHF/Llama-3-8b-sft-mixture",
    "rlhf-trainer:1.0",
    "café",
    "tab\there",
    "line\nbreak",
    "x" * 90,
    " ".join(["word"] * 30),
    "(a)",
    "a(b)c",
]
# Most of a real config: words, ids, paths (without them, nearly every random document would
# hold a trap somewhere and be left to PyYAML whole).
words = st.from_regex(r"[A-Za-z~(][A-Za-z0-9_./:@=+()-]{0,15}", fullmatch=True)
scalars = st.one_of(
    words,
    words,
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(TRAPS),
    st.text(alphabet="ab1.-_:/@~ #'\"=+()é\n", max_size=12),
)
keys = st.one_of(
    words, words, st.sampled_from(TRAPS), st.text(alphabet="abKey_-.1 :", min_size=0, max_size=10)
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(data=st.dictionaries(keys, documents, max_size=6))
def test_random_documents_match_pyyaml_or_are_left_to_it(data: dict[str, Any]) -> None:
    assert_same_or_unsure(data)


@pytest.mark.parametrize("text", TRAPS, ids=repr)
@pytest.mark.parametrize("where", ["value", "key", "item", "deep item", "nested value"])
def test_each_trap_matches_pyyaml_or_is_left_to_it(text: str, where: str) -> None:
    shapes = {
        "value": {"k": text},
        "key": {text: 1},
        "item": {"k": [text, 1]},
        "deep item": [[{"a": [text]}], [[text]]],
        "nested value": {"outer": {"inner": {"somewhat_long_key_here": text}}},
    }
    assert_same_or_unsure(shapes[where])


@pytest.mark.parametrize(
    "data",
    [
        {"a": {}, "b": [], "c": [{}], "d": [[]], "e": None},
        {"list": [{"a": 1, "b": {"c": [1, 2]}}, [1, [2, 3]], "x"]},
        [{"a": 1}, [[1]], []],
        {"floats": [0.0, -0.0, 1e-05, 1e20, 1.5e300, 3.0, float("inf"), -float("inf")]},
        {"ints": [0, -5, 2**65, True, False]},
    ],
    ids=["empties", "nesting", "top-level list", "floats", "ints"],
)
def test_layouts_match_pyyaml(data: Any) -> None:
    assert dump_block(data) == pyyaml(data)


def test_what_it_cannot_write_is_left_to_pyyaml() -> None:
    assert dump_block({"k": "line\n break"}) is None  # a space beside a break: double quotes
    assert dump_block({"k": "tab\there"}) is None
    assert dump_block({"k": "café"}) is None
    assert dump_block({"line\nbreak": 1}) is None
    assert dump_block({"k": " ".join(["word"] * 30)}) is None  # PyYAML folds it
    assert dump_block({"k": (1, 2)}) is None
    assert dump_block({1: "int key"}) is None
    assert dump_block({"x" * 130: 1}) is None
    assert dump_block("a lone scalar") is None
    assert dump_block({}) is None


SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test")


def runnable_examples() -> dict[str, Any]:
    """Every bundled RLHFJob example a pod can run (some `tiny-*-cpu` ones name files on the
    author's machine, which `rlhf run` reads and no pod has), and the test factory's job."""
    jobs = {"factory-ppo-7b": parse(job_body(), SETTINGS).job}
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for body in yaml.safe_load_all(path.read_text()):
            if isinstance(body, dict) and body.get("kind") == "RLHFJob":
                body.setdefault("metadata", {}).setdefault("namespace", "default")
                jobs[path.stem] = parse(body, SETTINGS).job
    assert sum(job is not None for job in jobs.values()) >= 15
    return {name: job for name, job in jobs.items() if job is not None}


@pytest.mark.parametrize(
    ("name", "job"),
    list(runnable_examples().items()),
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_every_runnable_example_takes_the_fast_path_and_matches_pyyaml(name: str, job: Any) -> None:
    parsed_job = job
    config = pod_job_config(parsed_job)
    fast = dump_block(config)
    assert fast is not None, "a bundled example's job.yaml left the fast path"
    assert fast == pyyaml(config)
    assert render_job_yaml(parsed_job) == fast
