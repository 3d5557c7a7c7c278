"""`rlhf validate` (the pydantic models) accepts the base and every example, and rejects every
invalid manifest of the corpus with a line naming the field. The server-side half of the
corpus runs in operator/tests/apiserver/ against the real apiextensions-apiserver."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from corpus import base_manifest, invalid_cases, names_field
from rlhf_trainer.config import load_document, load_file
from support.examples import example_files, example_id

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = example_files()
CREATE_CASES = [c for c in invalid_cases() if c.update is None]


def test_corpus_is_large_enough() -> None:
    assert len(invalid_cases()) >= 25


def test_base_manifest_is_valid() -> None:
    job = load_document(base_manifest(), "base.yaml", REPO)
    assert job.ok, job.problems


@pytest.mark.parametrize("path", EXAMPLES, ids=example_id)
def test_examples_are_valid(path: Path) -> None:
    for job in load_file(path):
        assert job.ok, job.problems


@pytest.mark.parametrize("case", CREATE_CASES, ids=lambda c: c.id)
def test_rlhf_validate_names_the_field(case) -> None:  # type: ignore[no-untyped-def]
    job = load_document(case.manifest, f"{case.id}.yaml", REPO)
    assert not job.ok, f"{case.id} was accepted"
    assert any(names_field(line, case.expect) for line in job.problems), job.problems


def test_cli_exit_codes_and_one_line_per_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    docs = [c.manifest for c in CREATE_CASES[:3]]
    bad.write_text(yaml.safe_dump_all(docs))
    result = subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", "validate", str(bad), *map(str, EXAMPLES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    problem_lines = [line for line in result.stdout.splitlines() if "bad.yaml" in line]
    assert len(problem_lines) >= 3
    for case in CREATE_CASES[:3]:
        assert any(case.expect in line for line in problem_lines), (case.id, problem_lines)
    ok = subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", "validate", *map(str, EXAMPLES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
