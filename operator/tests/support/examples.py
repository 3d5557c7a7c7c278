"""The RLHFJobs the project ships: every manifest under manifests/examples/ (single files and
kustomize directories) and the job shown in the README."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "manifests" / "examples"
# Kustomize's own files and the tiny task's data are not jobs.
_NOT_JOBS = {"kustomization.yaml"}


def example_files() -> list[Path]:
    """Every example RLHFJob manifest, sorted."""
    return sorted(
        p
        for p in EXAMPLES.rglob("*.yaml")
        if p.name not in _NOT_JOBS and "tiny-task" not in p.relative_to(EXAMPLES).parts
    )


def example_id(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


def local_only_examples() -> list[Path]:
    """Examples that name files beside them (for `rlhf run`): a cluster takes them through
    manifests/examples/kustomization.yaml, which ships those files in a ConfigMap."""
    kustomization = yaml.safe_load((EXAMPLES / "kustomization.yaml").read_text())
    return sorted(EXAMPLES / name for name in kustomization["resources"])


def kustomize_dirs() -> list[Path]:
    return sorted(p.parent for p in EXAMPLES.rglob("kustomization.yaml"))


def readme_job(tmp_dir: Path) -> Path:
    """The README's RLHFJob (its first YAML block), written to a file in `tmp_dir`."""
    text = (REPO / "README.md").read_text()
    match = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert match, "README.md has no yaml block"
    path = tmp_dir / "readme-job.yaml"
    path.write_text(match.group(1))
    return path
