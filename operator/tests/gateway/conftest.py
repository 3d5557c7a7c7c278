"""`service`: the gateway over HTTP in front of a secured emulator (harness.py)."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest

from .harness import Service, gateway_service


@pytest.fixture
async def service(tmp_path: pathlib.Path) -> AsyncIterator[Service]:
    async with gateway_service(tmp_path) as running:
        yield running
