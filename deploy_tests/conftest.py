"""Fixtures for the install artefacts: Helm/kubectl binaries, an offline copy of the chart, and
validators for Kubernetes objects (kubernetes-validate) and for our CRD."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_tool import REPO, Helm, ToolUnavailable, offline_chart_copy, tool_dir

# The operator's test support (CRD admission: prune, default, validate) is shared, not copied.
_OPERATOR_TESTS = str(REPO / "operator" / "tests")
if _OPERATOR_TESTS not in sys.path:
    sys.path.append(_OPERATOR_TESTS)

from support.crd_schema import CRDValidator, validator_for_crd  # noqa: E402

CRD_FILE = REPO / "crds" / "rlhf.dev_rlhfjobs.yaml"

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schema set
# kubernetes-validate bundles: every rendered object must be valid for both.
KUBE_VERSIONS = ("1.29.0", "1.37.0")


@pytest.fixture(scope="session")
def tools() -> Path:
    try:
        return tool_dir()
    except ToolUnavailable as error:
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def helm(tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(binary=tools / "helm", home=tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def offline_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return offline_chart_copy(tmp_path_factory.mktemp("chart"))


@pytest.fixture(scope="session")
def rlhfjob_validator() -> CRDValidator:
    crd = yaml.safe_load(CRD_FILE.read_text())
    return validator_for_crd(crd, "v1alpha1", strict=True)


@pytest.fixture(scope="session")
def kube_validate() -> Iterator[Callable[[dict[str, Any]], None]]:
    """Strict validation (unknown fields are errors) against the bundled Kubernetes schemas."""
    import kubernetes_validate

    def validate(obj: dict[str, Any]) -> None:
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                name = obj.get("metadata", {}).get("name")
                raise AssertionError(
                    f"{obj['kind']}/{name} is invalid for Kubernetes {version}: {error}"
                ) from error

    yield validate
