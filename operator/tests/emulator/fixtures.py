"""pytest fixtures for any test that needs an API server (imported by operator/tests/conftest.py).

- `emulator`: a running emulator with our CRD (once `crds/rlhf.dev_rlhfjobs.yaml` exists) and
  KubeRay's CRDs (when `../shared/kuberay-crds/` exists), namespace `default`, and a kubeconfig
  at `emulator.kubeconfig`.
- `kuberay_crds_dir`: the KubeRay CRD folder, or a loud skip when it is absent.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest

from .harness import KUBERAY_CRDS_DIR, Emulator, project_crds, run_emulator


@pytest.fixture
def kuberay_crds_dir() -> pathlib.Path:
    if not KUBERAY_CRDS_DIR.is_dir():
        pytest.skip(
            f"KubeRay CRDs not found at {KUBERAY_CRDS_DIR} (set KUBERAY_CRDS_DIR or provide "
            "../shared/kuberay-crds): RayJob validation cannot be checked"
        )
    return KUBERAY_CRDS_DIR


@pytest.fixture
async def emulator(tmp_path: pathlib.Path) -> AsyncIterator[Emulator]:
    async with run_emulator(crds=project_crds(), kubeconfig=tmp_path / "kubeconfig") as k8s:
        yield k8s
