"""Reading manifest files cannot be crashed: every hostile file is one problem line, and
values no Kubernetes object can hold are refused naming their field."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlhf_trainer.config import load_document, load_file
from rlhf_trainer.config.documents import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    DocumentError,
    document_problems,
    parse_documents,
    quote,
)

_PAIRS = zip("abcdefgh", "bcdefghi", strict=True)
_LEVELS = "\n".join(f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]" for p, c in _PAIRS)
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + _LEVELS + "\n"

REFUSED = [
    pytest.param("a: " + "[" * 5000 + "]" * 5000, "nest", id="flow-nesting-5000"),
    pytest.param(
        "".join("  " * i + "a:\n" for i in range(3000)) + "  " * 3000 + "b: 1\n",
        "nest",
        id="block-nesting-3000",
    ),
    pytest.param("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "deeper", id="depth-65"),
    pytest.param(BOMB, "aliases are expanded", id="alias-bomb"),
    pytest.param("a: &a [1, *a]\n", "contains it", id="recursive-alias"),
    pytest.param("a: 1\nb: 2\na: 3\n", "duplicate key 'a' (line 3)", id="duplicate-key"),
    pytest.param("a: {b: 1, b: 1}\n", "duplicate key 'b'", id="duplicate-nested-key"),
    pytest.param("a: [\n", "not valid YAML", id="broken"),
    pytest.param("a: !!python/object:os.system x\n", "not valid YAML", id="python-tag"),
]


@pytest.mark.parametrize(("text", "expect"), REFUSED)
def test_hostile_text_is_one_error(text: str, expect: str) -> None:
    with pytest.raises(DocumentError) as err:
        parse_documents(text)
    assert expect in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 600


def test_merge_keys_and_small_aliases_are_read_as_kubectl_reads_them() -> None:
    docs = parse_documents("x: &x {a: 1, b: [1, 2]}\ny: {<<: *x, a: 2}\nz: *x\n")
    assert docs == [
        {"x": {"a": 1, "b": [1, 2]}, "y": {"a": 2, "b": [1, 2]}, "z": {"a": 1, "b": [1, 2]}}
    ]


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        pytest.param("a: " + "9" * 5000, "spec.a: integer out of range", id="5000-digits"),
        pytest.param("a: -" + "9" * 5000, "spec.a: integer out of range", id="negative"),
        pytest.param("a: 9223372036854775808", "spec.a: integer out of range", id="int64-max+1"),
        pytest.param("a: {b: [0, .inf]}", "spec.a.b[1]: must be a finite number", id="inf"),
        pytest.param("a: .nan", "spec.a: must be a finite number", id="nan"),
    ],
)
def test_unstorable_numbers_name_their_field(text: str, expect: str) -> None:
    (doc,) = parse_documents(text)
    problems = document_problems(doc, "spec")
    assert any(p.startswith(expect) for p in problems), problems


def test_int64_bounds_themselves_are_fine() -> None:
    (doc,) = parse_documents("a: 9223372036854775807\nb: -9223372036854775808\n")
    assert document_problems(doc, "spec") == []


def test_quote_cuts_long_values() -> None:
    assert quote("x" * 10_000) == f"{'x' * 80!r}... (10000 characters)"
    assert quote("short") == "'short'"
    assert "entries" in quote({str(i): i for i in range(100)})


def test_files_beyond_the_size_bound_are_not_read_whole(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: " + b"x" * (MAX_FILE_BYTES + 10))
    (job,) = load_file(big)
    assert job.problems == [f"{big}: larger than 16 MiB"]


def test_binary_file_is_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    (job,) = load_file(path)
    assert job.problems == [f"{path}: not UTF-8 text (byte 0)"]


def test_unknown_root_fields_of_a_manifest_are_refused() -> None:
    """kubectl refuses `sepc:` beside `spec:`; a typo must not pass `rlhf validate` either."""
    manifest = {"apiVersion": "rlhf.dev/v1alpha1", "kind": "RLHFJob", "metadata": {"name": "a"}}
    job = load_document({**manifest, "sepc": {}, "spec": {}}, "a.yaml", Path("."))
    assert job.problems[0].startswith("sepc: unknown field")
