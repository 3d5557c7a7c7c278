"""Hostile manifests (issue 25), through every reader: `rlhf validate`, `rlhf-operator render`
and the operator's parse of a body refuse each with a line naming its field (the API server's
half runs in operator/tests/apiserver/, on the same cases); hostile files crash no CLI; hostile
strings in data fields stay inert in what is rendered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from corpus import base_manifest, deep_merge, expand, hostile_cases, names_field
from corpus.hostile_text import HostileText, hostile_texts
from rlhf_operator.cli import main as operator_main
from rlhf_operator.reconcile.parse import parse
from rlhf_operator.render import render_file, to_yaml
from rlhf_operator.settings import OperatorSettings
from rlhf_trainer.cli import main as rlhf_main
from rlhf_trainer.config import ExitCode
from rlhf_trainer.config.documents import parse_documents
from support.pod_security import violations

HERE = Path(__file__).parent
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
CASES = hostile_cases()
TEXTS = hostile_texts()
SAFE = [expand(row) for row in yaml.safe_load((HERE / "corpus" / "safe.yaml").read_text())]
# A problem line names a field and says why: it never carries a hostile value whole.
MAX_LINE = 1000


def test_the_corpus_holds_over_a_hundred_hostile_manifests() -> None:
    assert len(CASES) + len(TEXTS) + len(SAFE) >= 100
    ids = [c.id for c in CASES] + [t.id for t in TEXTS] + [s["id"] for s in SAFE]
    assert len(ids) == len(set(ids))


def _write(tmp_path: Path, manifest: dict[str, Any]) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest, width=10**9))
    return path


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_render_and_the_operator_refuse_naming_the_field(case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (rendered,) = render_file(_write(tmp_path, case.manifest), SETTINGS)
    assert not rendered.objects, f"{case.id} was rendered"
    assert any(names_field(p, case.expect) for p in rendered.problems), rendered.problems
    body = {**case.manifest, "metadata": {"name": "hostile", "namespace": "team", "uid": "u"}}
    parsed = parse(body, SETTINGS)
    assert parsed.job is None and parsed.refusal is not None, f"{case.id}: operator accepted"
    assert any(names_field(p, case.expect) for p in parsed.problems), parsed.problems
    assert all(len(p) < MAX_LINE for p in [*rendered.problems, *parsed.problems])


def _run_in_process(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 1, (code, out[-2000:], err[-2000:])
    return out + err


@pytest.mark.parametrize("case", TEXTS, ids=lambda t: t.id)
def test_hostile_files_are_one_line_errors(
    case: HostileText, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_bytes(case.text)
    for main, argv in (
        (rlhf_main, ["validate", "--cluster", str(path)]),
        (rlhf_main, ["plan", str(path)]),
        (operator_main, ["render", str(path)]),
    ):
        output = _run_in_process(main, argv, capsys)
        lines = output.splitlines()
        assert "Traceback" not in output and "internal error" not in output, output[-2000:]
        assert all(len(line) < MAX_LINE for line in lines), max(map(len, lines))
        assert any(case.expect in line for line in lines), (argv[0], lines[:5])


@pytest.mark.parametrize("case_id", ["billion-laughs", "flow-nesting-5000", "seed-5000-digits"])
def test_the_worst_files_crash_no_process(case_id: str, tmp_path: Path) -> None:
    """As processes, with their own interpreters: refused (validate and render exit 1; run
    exits ExitCode.INVALID, which the operator does not retry), no traceback."""
    path = tmp_path / "hostile.yaml"
    path.write_bytes(next(t for t in TEXTS if t.id == case_id).text)
    for argv in (
        [sys.executable, "-m", "rlhf_trainer", "validate", str(path)],
        [sys.executable, "-m", "rlhf_trainer", "run", str(path)],
        [sys.executable, "-m", "rlhf_operator.cli", "render", str(path)],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode in (1, ExitCode.INVALID), (argv, done.returncode, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr, done.stderr[-2000:]


def _inert_only(obj: Any, marker: str, where: str = "") -> list[str]:
    """Places outside a ConfigMap's data or an env var's value where `marker` shows up."""
    if isinstance(obj, dict):
        if obj.get("kind") == "ConfigMap":
            obj = {k: v for k, v in obj.items() if k not in ("data", "binaryData")}
        if set(obj) >= {"name", "value"} and isinstance(obj.get("value"), str):
            obj = {k: v for k, v in obj.items() if k != "value"}  # an env var's value
        return [p for k, v in obj.items() for p in _inert_only(v, marker, f"{where}.{k}")]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _inert_only(v, marker, f"{where}[{i}]")]
    return [where] if marker in str(obj) else []


def _pods(ray_job: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = ray_job["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]]
    pods += [g["template"] for g in cluster.get("workerGroupSpecs", [])]
    if "submitterPodTemplate" in ray_job["spec"]:
        pods.append(ray_job["spec"]["submitterPodTemplate"])
    return pods


@pytest.mark.parametrize("case", SAFE, ids=lambda s: s["id"])
def test_hostile_strings_in_data_stay_inert(case: dict[str, Any], tmp_path: Path) -> None:
    manifest = deep_merge(base_manifest(), case["patch"])
    (rendered,) = render_file(_write(tmp_path, manifest), SETTINGS)
    assert rendered.objects, rendered.problems
    marker = case["marker"]
    assert any(marker in json.dumps(o, ensure_ascii=False) for o in rendered.objects)
    assert _inert_only(rendered.objects, marker) == []
    ray_job = next(o for o in rendered.objects if o["kind"] == "RayJob")
    for pod in _pods(ray_job):
        assert violations(pod["spec"], pod.get("metadata", {}).get("annotations")) == []
    # What `render` prints reads back as exactly these objects: nothing injected.
    assert parse_documents(to_yaml(rendered.objects)) == rendered.objects
