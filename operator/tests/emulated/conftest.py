"""Fixtures: `cluster` (the emulator with our CRD and KubeRay's, KUBECONFIG pointing at it) and
`operator` (the real operator running in the test's event loop)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from emulator import Emulator

from .harness import Cluster, operator_running


@pytest.fixture
def cluster(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    if not any(i.group == "ray.io" for i in emulator.registry.all()):
        pytest.skip(
            "KUBERAY CRDS ABSENT: the emulator has no RayJob resource (../shared/kuberay-crds)"
        )
    assert emulator.kubeconfig is not None
    monkeypatch.setenv("KUBECONFIG", str(emulator.kubeconfig))
    return Cluster(emulator)


@pytest.fixture
async def operator(cluster: Cluster) -> AsyncIterator[Cluster]:
    async with operator_running():
        yield cluster
