"""`kubectl create token ACCOUNT -n TEAM` (how docs/service.md gives a tenant its api_key), run
with the real kubectl 1.35 against the API emulator over HTTPS (kubectl sends no bearer token
over plain HTTP): a TokenRequest answered with the account's token, which the gateway's
TokenReview then accepts as that account."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from helm_tool import ToolUnavailable, tool_dir

from emulator import Emulator


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the API's certificate")
async def test_kubectl_create_token(tmp_path: Path) -> None:
    try:
        kubectl = tool_dir() / "kubectl"
    except ToolUnavailable as err:
        pytest.skip(str(err))
    from substrate import certs

    ca, context = certs.make(tmp_path / "pki", ["127.0.0.1"])
    api = Emulator()
    await api.start("127.0.0.1", 0, ssl_context=context)
    try:
        security = api.enable_security()
        api.create_namespace("team-a")
        api.create("serviceaccounts", {"metadata": {"name": "tenant"}}, "team-a")
        admin = security.add_user("admin", ["system:masters"])
        config = api.write_kubeconfig(tmp_path / "kubeconfig", token=admin, ca_file=ca)
        run = await asyncio.create_subprocess_exec(
            str(kubectl),
            "--kubeconfig",
            str(config),
            "create",
            "token",
            "tenant",
            "-n",
            "team-a",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await run.communicate()
        assert run.returncode == 0, err.decode()
        token = out.decode().strip()
        assert security.authenticate(f"Bearer {token}").user == (
            "system:serviceaccount:team-a:tenant"
        )
    finally:
        await api.stop()
