"""Starts and stops a real etcd + k8s.io/apiextensions-apiserver pair on loopback.

The binaries come from `scripts/build-apiserver.sh` (Debian sid's Go sources, built once and
cached). The server serves CRDs and custom objects with the real Kubernetes 1.36 code: schema
validation, pruning, defaulting, CEL rules, status subresource. It serves no core API (no
Namespaces, ConfigMaps, ...) and no `/apis` discovery list.

Manual use (prints a KUBECONFIG and runs until Ctrl-C):
    cd operator/tests && ../../.venv/bin/python -m apiserver.server
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from .pki import Pki, make_pki, write_kubeconfig

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-apiserver.sh"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
# Admission plugins that need the core API or webhooks, which this server cannot reach.
DISABLED_ADMISSION = (
    "NamespaceLifecycle,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
    "ValidatingAdmissionPolicy,MutatingAdmissionPolicy"
)


def cache_dir() -> Path:
    """Where scripts/build-apiserver.sh puts its output (keep in sync with the script)."""
    explicit = os.environ.get("RLHF_APISERVER_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "rlhf-operator" / "apiserver"


@dataclass(frozen=True)
class Binaries:
    apiserver: Path
    etcd: Path

    @classmethod
    def from_cache(cls) -> Binaries:
        bin_dir = cache_dir() / "bin"
        return cls(apiserver=bin_dir / "apiextensions-apiserver", etcd=bin_dir / "etcd")

    def missing(self) -> list[Path]:
        return [p for p in (self.apiserver, self.etcd) if not os.access(p, os.X_OK)]


@dataclass(frozen=True)
class RunningApiServer:
    """Connection details of a started server; `url` is https://127.0.0.1:<port>."""

    url: str
    kubeconfig: Path
    pki: Pki
    workdir: Path
    etcd_url: str


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        # A new session, so that the child is never hit by the terminal's Ctrl-C before we
        # stop it in order (apiserver first, then etcd).
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)


def _wait_ready(
    url: str, context: ssl.SSLContext | None, proc: subprocess.Popen[bytes], log: Path, name: str
) -> None:
    """Polls `url` until it answers 200; fails early, with the log tail, if `proc` dies."""
    deadline = time.monotonic() + START_TIMEOUT_S
    last = "no answer yet"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with code {proc.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code}: {err.read(500).decode(errors='replace')}"
        except (OSError, ssl.SSLError) as err:
            last = str(err)
        time.sleep(0.25)
    raise TimeoutError(
        f"{name} not ready after {START_TIMEOUT_S:.0f}s at {url} ({last}):\n{_tail(log)}"
    )


def client_ssl_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return context


def etcd_command(binary: Path, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [
        str(binary),
        "--name=test",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=test={peer}",
        "--listen-metrics-urls=",
        "--log-level=warn",
        # Test data is throw-away; fsync only slows every write down.
        "--unsafe-no-fsync",
        # --max-request-bytes stays at etcd's default (1.5 MiB), as on a real cluster, so that an
        # oversized CRD fails here too.
    ]


def apiserver_command(
    binary: Path, etcd_url: str, port: int, pki: Pki, kubeconfig: Path, cert_dir: Path
) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={pki.server_cert}",
        f"--tls-private-key-file={pki.server_key}",
        f"--client-ca-file={pki.ca_cert}",
        # Without these three it looks for in-cluster config and exits.
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--authentication-skip-lookup",
        "--enable-priority-and-fairness=false",
        f"--disable-admission-plugins={DISABLED_ADMISSION}",
        "--v=1",
    ]


@contextmanager
def run_apiserver(workdir: Path, binaries: Binaries | None = None) -> Iterator[RunningApiServer]:
    """Starts etcd and the apiserver in `workdir`, waits for /readyz, stops both on exit."""
    binaries = binaries or Binaries.from_cache()
    missing = binaries.missing()
    if missing:
        raise FileNotFoundError(
            f"apiserver binaries missing: {', '.join(map(str, missing))}; run {BUILD_SCRIPT}"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    pki = make_pki(workdir / "pki")
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    url = f"https://127.0.0.1:{api_port}"
    kubeconfig = write_kubeconfig(workdir / "kubeconfig", url, pki)

    etcd_log = workdir / "etcd.log"
    etcd = _start(
        etcd_command(binaries.etcd, workdir / "etcd-data", etcd_port, peer_port), etcd_log
    )
    apiserver: subprocess.Popen[bytes] | None = None
    try:
        _wait_ready(f"{etcd_url}/health", None, etcd, etcd_log, "etcd")
        api_log = workdir / "apiserver.log"
        apiserver = _start(
            apiserver_command(
                binaries.apiserver, etcd_url, api_port, pki, kubeconfig, workdir / "certs"
            ),
            api_log,
        )
        # informer-sync never passes: the server's Service informer (used only to reach
        # conversion webhooks) lists core/v1 Services, which nothing serves here.
        _wait_ready(
            f"{url}/readyz?exclude=informer-sync",
            client_ssl_context(pki),
            apiserver,
            api_log,
            "apiextensions-apiserver",
        )
        yield RunningApiServer(
            url=url, kubeconfig=kubeconfig, pki=pki, workdir=workdir, etcd_url=etcd_url
        )
    finally:
        if apiserver is not None:
            _stop(apiserver)
        _stop(etcd)


def main() -> None:
    import tempfile

    with (
        tempfile.TemporaryDirectory(prefix="rlhf-apiserver-") as tmp,
        run_apiserver(Path(tmp)) as server,
    ):
        print(f"apiextensions-apiserver ready at {server.url}")
        print(f"export KUBECONFIG={server.kubeconfig}   (logs in {tmp}; Ctrl-C stops)")
        with suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()
