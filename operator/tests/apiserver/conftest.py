"""Fixtures for the real-apiserver tier.

`apiserver_session` (session scope) starts etcd + k8s.io/apiextensions-apiserver once and yields
an `ApiClient`; `apiserver` (function scope) is the same client, and deletes every custom object
in namespace "default" after the test (installed CRDs stay, so each is installed once).

Binaries come from scripts/build-apiserver.sh. When they are missing the tier is SKIPPED with a
loud reason in the `-ra` summary; RLHF_BUILD_APISERVER=1 builds them first (~6 min on 2 cores),
RLHF_REQUIRE_APISERVER=1 turns any skip into a failure (CI, where the tier must run).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import NoReturn

import pytest

from .client import ApiClient
from .server import BUILD_SCRIPT, Binaries, run_apiserver


def _skip_or_fail(reason: str) -> NoReturn:
    loud = f"APISERVER TIER NOT RUN: {reason}"
    if os.environ.get("RLHF_REQUIRE_APISERVER") == "1":
        pytest.fail(f"{loud} (RLHF_REQUIRE_APISERVER=1 forbids skipping)", pytrace=False)
    pytest.skip(loud)


def _build() -> None:
    result = subprocess.run(
        [str(BUILD_SCRIPT)], capture_output=True, text=True, check=False, timeout=1800
    )
    if result.returncode != 0:
        _skip_or_fail(f"{BUILD_SCRIPT.name} failed: {result.stderr.strip()[-1500:]}")


def _binaries() -> Binaries:
    binaries = Binaries.from_cache()
    if binaries.missing() and os.environ.get("RLHF_BUILD_APISERVER") == "1":
        _build()
    missing = binaries.missing()
    if missing:
        _skip_or_fail(
            f"apiextensions-apiserver/etcd not built ({', '.join(map(str, missing))} missing). "
            f"Run scripts/{BUILD_SCRIPT.name} (~6 min, cached) or set RLHF_BUILD_APISERVER=1."
        )
    return binaries


@pytest.fixture(scope="session")
def apiserver_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiClient]:
    binaries = _binaries()
    with run_apiserver(tmp_path_factory.mktemp("apiserver"), binaries) as server:
        client = ApiClient(server)
        yield client
        client.session.close()


@pytest.fixture
def apiserver(apiserver_session: ApiClient) -> Iterator[ApiClient]:
    yield apiserver_session
    apiserver_session.delete_all_custom_objects()
