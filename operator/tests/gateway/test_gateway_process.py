"""`rlhf-gateway` as the chart starts it: its own process, a settings file, a kubeconfig, and
HTTPS with a certificate; the SDK reaches it as a tenant would (a self-signed certificate, so
`verify=False`, as TESTING.md says the SDK takes it)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import openai
import pytest
import yaml

from .harness import CATALOG, gateway_service
from .test_gateway_files import SFT_ROWS, jsonl


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificate")
async def test_the_console_script_serves_https_with_its_settings(tmp_path: pathlib.Path) -> None:
    key, cert = tmp_path / "tls.key", tmp_path / "tls.crt"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    async with gateway_service(tmp_path) as service:
        settings = tmp_path / "gateway.yaml"
        settings.write_text(
            yaml.safe_dump(
                {
                    "catalog": CATALOG,
                    "files": {
                        "uri": "pvc://rlhf-files/uploads",
                        "mountPath": str(tmp_path / "served"),
                    },
                }
            )
        )
        kubeconfig = tmp_path / "gateway-kubeconfig"  # the harness's: the gateway's own token
        port = _free_port()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "rlhf_gateway.cli",
            "--config",
            str(settings),
            "--kubeconfig",
            str(kubeconfig),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--certfile",
            str(cert),
            "--keyfile",
            str(key),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ},
        )
        try:
            client = openai.AsyncOpenAI(
                base_url=f"https://127.0.0.1:{port}/v1",
                api_key=service.tokens["team-a"],
                http_client=openai.DefaultAsyncHttpxClient(verify=False),
                max_retries=0,
            )
            service.clients.append(client)
            for _ in range(200):
                try:
                    models = await client.models.list()
                    break
                except openai.APIConnectionError:
                    assert process.returncode is None, await process.stdout.read()  # type: ignore[union-attr]
                    await asyncio.sleep(0.1)
            assert [m.id for m in models.data] == ["tiny-llama-random"]
            made = await client.files.create(file=("t.jsonl", jsonl(SFT_ROWS)), purpose="fine-tune")
            assert (tmp_path / "served" / "uploads" / "team-a" / f"{made.id}.jsonl").exists()
            await client.close()  # before the server stops: it waits for open connections
        finally:
            process.terminate()
            await process.wait()
