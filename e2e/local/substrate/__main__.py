"""The local substrate as one process: the API server (the emulator, with TLS, ServiceAccount
tokens and RBAC), the node's kubelet and runtime, the workload controllers, KubeRay's part, and
the chart's operator. Started in the background by e2e/local/up.sh; stopped by down.sh (SIGTERM:
every pod is stopped, the pod network removed).

    python -m substrate serve --state DIR --kubeconfig FILE [--images auto|built|host]
                              [--set chart.key=value ...]

Pods run from the images `make images` built (store.py) when there are any (`--images auto`),
else from this machine's filesystem and this checkout's venv (host mode, images.py); which one
ran is logged and recorded in the state's substrate.json.

Several substrates may run on one machine (say, a person's and a test run's): each takes the
first free instance number, which picks its bridge and pod subnet (198.18.<213+n>.0/24).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from emulator import Emulator, project_crds
from emulator.harness import KUBERAY_CRDS_DIR

from . import certs, chart, images, objectstore, plans, store
from .kubelet import Kubelet
from .kuberay import KubeRay
from .runtime import Network, Runtime
from .workloads import Workloads

log = logging.getLogger("substrate")
TICK_SECONDS = 0.5
INSTANCES = 8


def _claim_instance() -> tuple[int, IO[str]]:
    """The first instance number no other substrate holds (an flock held for our lifetime)."""
    locks = Path("/run/lock") if Path("/run/lock").is_dir() else Path(tempfile.gettempdir())
    for n in range(INSTANCES):
        handle = open(locks / f"rlhf-substrate-{n}.lock", "w")  # noqa: SIM115 - held open
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return n, handle
        except BlockingIOError:
            handle.close()
    raise SystemExit(f"{INSTANCES} local substrates are running already")


def _resolver(kubelet: Kubelet) -> Callable[[str], str | None]:
    """Service DNS names the way pods resolve them (the substrate has no DNS server)."""

    def resolve(host: str) -> str | None:
        parts = host.split(".")
        key = ".".join(parts[:2]) if len(parts) >= 2 else host
        found = kubelet.services().get(key)
        return found[1][0] if found and found[1] else None

    return resolve


async def serve(args: argparse.Namespace) -> None:
    if not KUBERAY_CRDS_DIR.is_dir():
        raise SystemExit(
            f"KubeRay's CRDs are missing at {KUBERAY_CRDS_DIR}: set KUBERAY_CRDS_DIR to a folder "
            "holding ray.io_rayjobs.yaml and ray.io_rayclusters.yaml (KubeRay v1.7.0)"
        )
    instance, lock = _claim_instance()
    state: Path = args.state
    state.mkdir(parents=True, exist_ok=True)
    subnet = ipaddress.ip_network(f"198.18.{213 + instance}.0/24")
    network = Network(bridge=f"rlhfsub{instance}", subnet=subnet)
    await network.setup()
    ca_file, tls = certs.make(state / "pki", [network.gateway, "127.0.0.1"])
    api = Emulator()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    kubelet: Kubelet | None = None
    kuberay: KubeRay | None = None
    stack = contextlib.ExitStack()  # what else was started for the pods (the S3 store)
    try:
        # Pods reach it as a cluster's `kubernetes` Service: port 443 of the node's pod-network
        # address (kopf's in-cluster login goes to https://kubernetes.default.svc).
        url = await api.start("127.0.0.1", 0, ssl_context=tls, also_on=[(network.gateway, 443)])
        security = api.enable_security()
        admin = security.add_user("kubernetes-admin", ["system:masters"])
        api.write_kubeconfig(args.kubeconfig, token=admin, ca_file=ca_file)
        api.register_crds(*project_crds())
        for namespace in ("default", "kube-system", "kube-public", "kube-node-lease"):
            api.create_namespace(namespace)
        cluster = plans.Cluster(state, network.gateway, 443, ca_file)
        mode, why = store.choose(args.images, store.Store())
        log.info("pods run from %s", why)
        loader = store.Store().load if mode == "built" else images.load
        kubelet = Kubelet(api, Runtime(network), cluster, security, loader)
        api.pod_logs = kubelet.logs
        kuberay = KubeRay(api, _resolver(kubelet))
        controllers: list[Workloads | KubeRay | Kubelet] = [
            Workloads(api, cluster),
            kuberay,
            kubelet,
        ]
        if not args.no_chart:
            values = dict(v.split("=", 1) for v in args.set)
            files = []
            if objectstore.wanted(values):  # the gateway's files go to the node's S3 store
                s3 = objectstore.ObjectStore(network.gateway)
                await asyncio.to_thread(s3.start)
                stack.callback(s3.stop)
                log.info("S3 store (the gateway's files) at %s", s3.endpoint)
                values = s3.chart_values() | values
                files.append(objectstore.VALUES)
            objects = await asyncio.to_thread(chart.render, values, files=files)
            chart.install(api, objects)
        (state / "substrate.json").write_text(
            json.dumps(
                {
                    "url": url,
                    "kubeconfig": str(args.kubeconfig),
                    "instance": instance,
                    "bridge": network.bridge,
                    "subnet": str(subnet),
                    "pid": os.getpid(),
                    "images": {"mode": mode, "why": why},
                }
            )
        )
        log.info("serving %s (instance %d, pods on %s)", url, instance, subnet)
        while not stop.is_set():
            for controller in controllers:
                try:
                    await controller.sync()
                except Exception:
                    log.exception("%s failed; retried next tick", type(controller).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_SECONDS)
    finally:
        log.info("stopping: every pod, then the API server and the pod network")
        if kubelet is not None:
            await kubelet.shutdown(grace=args.shutdown_grace)
        if kuberay is not None:
            await kuberay.close()
        await api.stop()
        stack.close()
        await network.teardown()
        (state / "substrate.json").unlink(missing_ok=True)
        lock.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m substrate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="run the substrate in the foreground")
    run.add_argument("--state", type=Path, required=True, help="state directory")
    run.add_argument(
        "--kubeconfig", type=Path, required=True, help="where to write the admin kubeconfig"
    )
    run.add_argument(
        "--set", action="append", default=[], help="a Helm value of the operator chart"
    )
    run.add_argument("--no-chart", action="store_true", help="do not install the operator chart")
    run.add_argument(
        "--images",
        choices=store.MODES,
        default=os.environ.get("SUBSTRATE_IMAGES", "auto"),
        help="built: the images `make images` exported; host: this machine's filesystem and "
        "venv; auto (default, or SUBSTRATE_IMAGES): built when there are any",
    )
    run.add_argument(
        "--shutdown-grace", type=float, default=5.0, help="seconds pods get at shutdown"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the local substrate needs root (mount and network namespaces, a bridge)")
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
