"""`rlhf validate`: exit codes and one `FILE: path: message` line per problem."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlhf_trainer.cli import main

VALID_MANIFEST = """
apiVersion: rlhf.dev/v1alpha1
kind: RLHFJob
metadata: {name: ok-ppo}
spec:
  algorithm: {name: ppo}
  models: {actor: {randomInit: {}}, rewardFunction: {builtin: repeat-letter}}
  data: {train: [{builtin: repeat-letter}]}
  training: {rolloutBatchSize: 8, trainBatchSize: 8, microTrainBatchSize: 4}
"""

GRPO_ONE_SAMPLE = """
apiVersion: rlhf.dev/v1alpha1
kind: RLHFJob
metadata: {name: bad-grpo}
spec:
  algorithm: {name: grpo}
  models: {actor: {randomInit: {}}, rewardFunction: {builtin: repeat-letter}}
  data: {train: [{builtin: repeat-letter}]}
  rollout: {samplesPerPrompt: 1}
"""

BARE_CONFIG_NO_REWARD = """
algorithm: {name: rloo}
models: {actor: {randomInit: {}}}
data: {train: [{builtin: repeat-letter}]}
rollout: {samplesPerPrompt: 4}
"""

CASES = [
    pytest.param(VALID_MANIFEST, 0, [": ok (RLHFJob ok-ppo)"], id="valid-manifest"),
    pytest.param(
        GRPO_ONE_SAMPLE,
        1,
        [": spec.rollout.samplesPerPrompt: must be > 1 for algorithm grpo (got 1)"],
        id="grpo-needs-several-samples",
    ),
    pytest.param(
        BARE_CONFIG_NO_REWARD,
        1,
        [": models: algorithm rloo needs a reward source"],
        id="bare-config-without-reward",
    ),
    pytest.param("just a string\n", 1, [": <root>: expected a mapping"], id="not-a-mapping"),
    pytest.param("a: [unclosed\n", 1, ["not valid YAML/JSON"], id="broken-yaml"),
]


@pytest.mark.parametrize(("text", "code", "expected"), CASES)
def test_validate_reports_each_problem_prefixed_by_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, code: int, expected: list[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(text))
    assert main(["validate", str(path)]) == code
    out = capsys.readouterr().out.splitlines()
    for fragment in expected:
        assert any(line.startswith(str(path)) and fragment in line for line in out), out


def test_validate_names_the_document_in_multi_document_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(VALID_MANIFEST + "\n---\n" + GRPO_ONE_SAMPLE)
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"{path}[0] (ok-ppo): ok (RLHFJob ok-ppo)" in out
    assert (
        f"{path}[1] (bad-grpo): spec.rollout.samplesPerPrompt: must be > 1 for algorithm grpo "
        "(got 1)" in out
    )


def test_validate_missing_file_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "absent.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().out


def test_module_entrypoint_runs_validate(tmp_path: Path) -> None:
    """`python -m rlhf_trainer` is the cluster entrypoint; it must start without torch."""
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(GRPO_ONE_SAMPLE))
    proc = subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "samplesPerPrompt: must be > 1" in proc.stdout


def test_run_rejects_non_positive_max_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "whatever.yaml", "--max-steps", "0"]) == 2
    assert "--max-steps must be > 0" in capsys.readouterr().err
