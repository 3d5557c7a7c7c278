"""Fixtures for the emulator's own tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from emulator import Emulator, run_emulator
from emulator.testkit import Api, widget_crd


@pytest.fixture
async def k8s() -> AsyncIterator[Emulator]:
    async with run_emulator(crds=[widget_crd()], namespaces=("default", "other")) as emulator:
        yield emulator


@pytest.fixture
async def api(k8s: Emulator) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, k8s.url)
