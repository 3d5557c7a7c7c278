"""Container probes and lifecycle hooks as a kubelet runs them: httpGet and tcpSocket against
the pod's address (the node reaches every pod over the bridge), exec inside the container's
namespaces and root as its user (nsenter), with the probe's timeout. Startup probes are not
run (none of the charts or KubeRay's pods here use one). A preStop hook is an exec or httpGet
action (or `sleep`) run like a probe, with the container's environment and the pod's remaining
grace period as its timeout (pods.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Mapping
from typing import Any

import aiohttp

JSON = dict[str, Any]


def _port(value: Any, container: JSON) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ValueError(f"no container port named {value!r}")


async def run_probe(
    probe: Mapping[str, Any],
    *,
    container: JSON,
    pod_ip: str,
    init_pid: int | None,
    uid: int,
    gid: int,
    env: Mapping[str, str] | None = None,
) -> tuple[bool, str]:
    """(success, what failed) for one probe attempt (or hook: `env` is the container's
    environment, which a CRI exec gives its command)."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            action = probe["httpGet"]
            scheme = str(action.get("scheme", "HTTP")).lower()
            host = action.get("host") or pod_ip
            url = f"{scheme}://{host}:{_port(action['port'], container)}{action.get('path', '/')}"
            headers = {h["name"]: h["value"] for h in action.get("httpHeaders") or []}
            client = aiohttp.ClientTimeout(total=timeout)
            async with (
                aiohttp.ClientSession(timeout=client) as session,
                session.get(url, headers=headers, ssl=False) as response,
            ):
                if 200 <= response.status < 400:
                    return True, ""
                return False, f"HTTP probe failed with statuscode: {response.status}"
        if "tcpSocket" in probe:
            port = _port(probe["tcpSocket"]["port"], container)
            _, writer = await asyncio.wait_for(asyncio.open_connection(pod_ip, port), timeout)
            writer.close()
            return True, ""
        if "exec" in probe:
            command = probe["exec"].get("command") or []
            return await _exec(command, init_pid, uid, gid, timeout, env)
    except (OSError, TimeoutError, aiohttp.ClientError, ValueError) as err:
        return False, f"Get/dial failed: {err or type(err).__name__}"
    return False, "the probe has no httpGet, tcpSocket or exec action"


async def _exec(
    command: list[str],
    init_pid: int | None,
    uid: int,
    gid: int,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> tuple[bool, str]:
    if init_pid is None:
        return False, "the container is not running"
    process = await asyncio.create_subprocess_exec(
        shutil.which("nsenter") or "nsenter",
        "--target",
        str(init_pid),
        "--mount",
        "--net",
        "--pid",
        "--uts",
        "--root",
        "--wd",
        f"--setuid={uid}",
        f"--setgid={gid}",
        "--",
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=dict(env) if env is not None else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        return False, f"command timed out after {timeout:g}s"
    if process.returncode == 0:
        return True, ""
    return False, f"command failed with exit code {process.returncode}: {out.decode()[-300:]}"
