"""KubeRay's real CRDs (v1.7.0) from ../shared/kuberay-crds, read at test time, never copied."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest

from support.crd_schema import CRDValidator, load_yaml_documents, validator_for_crd

KUBERAY_CRDS = Path(
    os.environ.get("KUBERAY_CRDS_DIR", Path(__file__).resolve().parents[4] / "shared/kuberay-crds")
)


@functools.cache
def _validator(kind_file: str) -> CRDValidator | None:
    path = KUBERAY_CRDS / kind_file
    if not path.exists():
        return None
    return validator_for_crd(load_yaml_documents(path)[0], "v1", strict=True)


def rayjob_errors(obj: dict[str, Any]) -> list[str]:
    """Strict-mode errors of a RayJob against KubeRay's CRD; skips loudly without the CRDs."""
    validator = _validator("ray.io_rayjobs.yaml")
    if validator is None:
        pytest.skip(
            f"KUBERAY CRDS ABSENT: {KUBERAY_CRDS}/ray.io_rayjobs.yaml not found; generated "
            "RayJobs were NOT validated against KubeRay's schema (set KUBERAY_CRDS_DIR)"
        )
    return validator.validate(obj)
