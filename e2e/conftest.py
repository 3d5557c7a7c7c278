"""The cluster journey on two substrates: a real cluster with KubeRay when E2E_KUBECONFIG names
one (kind or k3d, see e2e/README.md), else the local substrate (e2e/local/), which this suite
starts for the session and stops after it. Where the local substrate cannot run (not root, no
util-linux/iproute2, no KubeRay CRDs) the journey is skipped with that reason."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import Cluster
from e2e_local import LocalSubstrate, image_mode, unavailable
from e2e_settings import (
    KEEP,
    KUBECONFIG,
    LOCAL,
    NAMESPACE,
    OPERATOR_IMAGE,
    OPERATOR_NAMESPACE,
    RELEASE,
    TIMEOUT,
    TRAINER_IMAGE,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO / "deploy_tests"))  # shared helpers: offline chart copy, Argo Lua


IMAGE_SOURCE: list[str] = []  # what the session's local substrate ran its pods from


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for source in IMAGE_SOURCE:
        terminalreporter.write_line(f"e2e: the local substrate ran its pods from {source}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    why = unavailable() if LOCAL else None
    reason = f"cluster e2e: no E2E_KUBECONFIG, and {why} (e2e/README.md has both ways)"
    for item in items:
        if item.get_closest_marker("e2e") is None:
            continue
        if why is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
        # The job may take up to E2E_TIMEOUT_SECONDS on a busy machine: the suite's per-test
        # limit must not cut it short (the cluster's start and the job's end come on top).
        item.add_marker(pytest.mark.timeout(int(TIMEOUT) + 900))


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
def substrate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSubstrate | None]:
    """The local substrate for the session (None on a real cluster). Its setup installs the
    chart with the e2e images, as the `operator` fixture does on a real cluster; its teardown
    checks that down.sh left no process and no mount behind. A failed start is stopped too
    (up.sh stops what it started; down.sh runs anyway, in case up.sh itself was cut short)."""
    if not LOCAL:
        yield None
        return
    mode, why = image_mode()
    local = LocalSubstrate(tmp_path_factory.mktemp("substrate"), images=mode)
    repository, _, tag = OPERATOR_IMAGE.rpartition(":")
    try:
        local.up(
            f"image.repository={repository}",
            f"image.tag={tag}",
            f"trainer.defaultImage={TRAINER_IMAGE}",
            "logLevel=DEBUG",
            # The gateway (test_gateway_journey.py), its files on the substrate's S3 store.
            "gateway.enabled=true",
        )
        IMAGE_SOURCE.append(f"{local.image_source()} ({why})")
        yield local
    finally:
        local.down()
        leftovers = local.processes(argv_contains=str(local.state)) + local.mounts()
        assert not leftovers, "e2e/local/down.sh left these behind:\n" + "\n".join(leftovers)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, substrate: LocalSubstrate | None) -> Cluster:
    helm, kubectl = _tools()
    config = Path(KUBECONFIG) if substrate is None else substrate.kubeconfig
    found = Cluster(config, kubectl, helm, tmp_path_factory.mktemp("helm-home"))
    found.kubectl("get", "crd", "rayjobs.ray.io")  # KubeRay must be there already
    return found


@pytest.fixture(scope="session")
def operator(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, substrate: LocalSubstrate | None
) -> Iterator[str]:
    """The chart, installed from this checkout with the locally built images (on the local
    substrate: installed when it started, its operator pod Ready)."""
    if substrate is not None:
        yield RELEASE
        return
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
