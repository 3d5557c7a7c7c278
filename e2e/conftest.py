"""The real-cluster suite: opt-in with E2E_KUBECONFIG (a kind or k3d cluster running KubeRay,
see e2e/README.md). Without it every e2e test is skipped with that reason."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import Cluster
from e2e_settings import (
    KEEP,
    KUBECONFIG,
    NAMESPACE,
    OPERATOR_IMAGE,
    OPERATOR_NAMESPACE,
    RELEASE,
    TRAINER_IMAGE,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO / "deploy_tests"))  # shared helpers: offline chart copy, Argo Lua

SKIP_REASON = (
    "real-cluster e2e: set E2E_KUBECONFIG to a kind/k3d cluster with KubeRay and the e2e images "
    "(e2e/kind-up.sh prints it; steps in e2e/README.md). No cluster on this machine."
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if KUBECONFIG:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(skip)


def _tools() -> tuple[Path, Path]:
    """helm and kubectl: E2E_HELM / E2E_KUBECTL, else the ones scripts/get-helm.sh caches."""
    helm, kubectl = os.environ.get("E2E_HELM"), os.environ.get("E2E_KUBECTL")
    if helm and kubectl:
        return Path(helm), Path(kubectl)
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "get-helm.sh")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    bin_dir = Path(out.strip().splitlines()[-1])
    return Path(helm or bin_dir / "helm"), Path(kubectl or bin_dir / "kubectl")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    helm, kubectl = _tools()
    found = Cluster(Path(KUBECONFIG), kubectl, helm, tmp_path_factory.mktemp("helm-home"))
    found.kubectl("get", "crd", "rayjobs.ray.io")  # KubeRay must be there already
    return found


@pytest.fixture(scope="session")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The chart, installed from this checkout with the locally built images."""
    from helm_tool import offline_chart_copy

    chart = offline_chart_copy(tmp_path_factory.mktemp("chart"))
    repository, _, tag = OPERATOR_IMAGE.rpartition(":")
    cluster.helm(
        "upgrade",
        "--install",
        RELEASE,
        str(chart),
        "--namespace",
        OPERATOR_NAMESPACE,
        "--create-namespace",
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=IfNotPresent",
        "--set",
        f"trainer.defaultImage={TRAINER_IMAGE}",
        "--set",
        "logLevel=DEBUG",
        "--wait",
        "--timeout",
        "5m",
    )
    yield RELEASE
    if not KEEP:
        cluster.helm("uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait")


@pytest.fixture(scope="session")
def namespace(cluster: Cluster) -> Iterator[str]:
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    yield NAMESPACE
    if not KEEP:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=true", timeout=600)
