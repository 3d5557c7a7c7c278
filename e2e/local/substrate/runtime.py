"""The container runtime and pod network of the local substrate (what containerd and a CNI
plugin do for a kubelet), with namespaces and no cgroups:

- The pod network is a Linux bridge on this machine with one /24 (198.18.213.0/24 for the
  first substrate, a range reserved for benchmarks; the n-th gets 198.18.<213+n>.0/24). Its
  first address is the node's: the API server listens there too, so pods reach it like a
  cluster's `kubernetes` Service. Each pod gets its own network namespace, a veth pair into the
  bridge and one address, so its ports are its own (two Ray nodes both listen on 8080 and
  52365). There is no NAT: pods reach each other and the node, nothing beyond.
- A sandbox process per pod holds the pod's namespaces (sandbox.py); each container runs in a
  fresh PID and mount namespace inside them (container.py), so stopping a container is one
  signal to its PID 1: when PID 1 dies, the kernel kills every process of the namespace.
- Every process the runtime starts gets SIGKILL when the substrate's process dies (prctl
  PDEATHSIG), so nothing outlives the substrate even when it is killed outright.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_PDEATHSIG = 1
BRIDGE = "rlhfsub0"
SUBNET = ipaddress.ip_network("198.18.213.0/24")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # e2e/local, where `substrate` lives


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL it when the substrate dies."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class RuntimeFailure(Exception):
    """A runtime command failed; the message carries its output."""


async def run(*argv: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeFailure(f"`{' '.join(argv)}` exited {process.returncode}: {out.decode()}")
    return out.decode()


@dataclass
class Network:
    bridge: str = BRIDGE
    subnet: ipaddress.IPv4Network | ipaddress.IPv6Network = SUBNET
    _free: list[str] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        return str(next(self.subnet.hosts()))

    async def setup(self) -> None:
        """The bridge (a stale one from a killed substrate is replaced)."""
        await self.teardown()
        await run("ip", "link", "add", self.bridge, "type", "bridge")
        await run(
            "ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge
        )
        await run("ip", "link", "set", self.bridge, "up")
        self._free = [str(ip) for ip in list(self.subnet.hosts())[1:]]

    async def teardown(self) -> None:
        with contextlib.suppress(RuntimeFailure):
            await run("ip", "link", "del", self.bridge)

    def allocate(self) -> str:
        if not self._free:
            raise RuntimeFailure(f"no free pod address left in {self.subnet}")
        return self._free.pop(0)

    def release(self, ip: str) -> None:
        self._free.append(ip)

    async def attach(self, pid: int, ip: str, veth: str) -> None:
        """A veth pair: `veth` on the bridge, `eth0` in the namespace of process `pid`."""
        await run(
            "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(pid)
        )
        await run("ip", "link", "set", veth, "master", self.bridge, "up")
        inside = ("nsenter", "--target", str(pid), "--net")
        await run(*inside, "ip", "addr", "add", f"{ip}/{self.subnet.prefixlen}", "dev", "eth0")
        await run(*inside, "ip", "link", "set", "eth0", "up")
        await run(*inside, "ip", "link", "set", "lo", "up")
        await run(*inside, "ip", "route", "add", "default", "via", self.gateway)


@dataclass
class Sandbox:
    process: asyncio.subprocess.Process
    ip: str

    @property
    def pid(self) -> int:
        return self.process.pid


class Runtime:
    def __init__(self, network: Network) -> None:
        self.network = network
        self._env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(PACKAGE_ROOT),
        }

    async def _spawn(self, argv: list[str], log: Path | None) -> asyncio.subprocess.Process:
        out = log.open("ab") if log is not None else None
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out if out is not None else asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.STDOUT if out is not None else asyncio.subprocess.DEVNULL,
                env=self._env,
                preexec_fn=_die_with_parent,
                start_new_session=True,
            )
        finally:
            if out is not None:
                out.close()

    async def start_sandbox(self, plan: Path, ready: Path, veth: str) -> Sandbox:
        """The pod's namespaces, hostname, memory volumes and network; waits until ready."""
        process = await self._spawn(
            [
                "unshare",
                "--net",
                "--uts",
                "--mount",
                "--propagation",
                "private",
                "--",
                sys.executable,
                "-m",
                "substrate.sandbox",
                str(plan),
            ],
            plan.with_suffix(".log"),
        )
        ip = self.network.allocate()
        sandbox = Sandbox(process, ip)
        try:
            for _ in range(600):
                if ready.exists():
                    break
                if process.returncode is not None:
                    raise RuntimeFailure(
                        f"the pod sandbox exited: {plan.with_suffix('.log').read_text()}"
                    )
                await asyncio.sleep(0.05)
            else:
                raise RuntimeFailure("the pod sandbox did not come up within 30 s")
            await self.network.attach(process.pid, ip, veth)
        except BaseException:
            await self.stop_sandbox(sandbox)
            raise
        return sandbox

    async def stop_sandbox(self, sandbox: Sandbox) -> None:
        """Its namespaces go with it: the veth pair, the memory volumes."""
        if sandbox.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                sandbox.process.kill()
            await sandbox.process.wait()
        self.network.release(sandbox.ip)

    async def start_container(
        self, sandbox: Sandbox, plan: Path, log: Path
    ) -> asyncio.subprocess.Process:
        return await self._spawn(
            [
                "nsenter",
                "--target",
                str(sandbox.pid),
                "--net",
                "--uts",
                "--mount",
                "--",
                sys.executable,
                "-m",
                "substrate.container",
                str(plan),
            ],
            log,
        )

    @staticmethod
    def init_pid(process: asyncio.subprocess.Process) -> int | None:
        """The host PID of a container's PID 1 (the child container.py's shim forked)."""
        try:
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text()
        except OSError:
            return None
        found = children.split()
        return int(found[0]) if found else None

    def signal(self, process: asyncio.subprocess.Process, signum: int) -> None:
        """To the container's PID 1 (SIGKILL there ends the whole PID namespace)."""
        pid = self.init_pid(process)
        with contextlib.suppress(ProcessLookupError):
            if pid is not None:
                os.kill(pid, signum)
            elif signum == signal.SIGKILL and process.returncode is None:
                process.kill()  # the shim's death kills PID 1 (PDEATHSIG), and the namespace
