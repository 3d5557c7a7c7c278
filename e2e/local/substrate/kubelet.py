"""The node: the scheduler's binding step and the kubelet of the local substrate's only node.

Every tick it binds new pods to the node (or leaves them Pending with the scheduler's reason
when they ask for devices this machine lacks or claim a volume that does not exist), runs a pod
worker (pods.py) for each pod bound here, stops the pods that are deleted (graceful deletion:
the API keeps a terminating pod until its containers are gone, then the kubelet removes it), and
keeps each pod's /etc/hosts current. There is no DNS: /etc/hosts names every Service of the
cluster (a headless Service by its pods' addresses, any other by its first ready pod's, since
there is no kube-proxy and no virtual IP). It also serves `kubectl logs`.

Not emulated: resource accounting and limits (no cgroups: a pod may use every CPU and all the
memory of the machine), node objects, image pulls, node-pressure eviction, static pods (the
API server's Eviction API works: the kubelet keeps the DisruptionTarget condition it sets and
runs the containers' preStop hooks within the grace period, pods.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from emulator import ApiError, Emulator
from emulator.rbac import Security

from . import plans
from .events import Recorder, now
from .images import LocalImage
from .images import load as load_host_image
from .pods import PodWorker
from .podspec import ConfigError
from .runtime import Runtime

JSON = dict[str, Any]
NODE = "rlhf-substrate"
log = logging.getLogger("substrate.kubelet")
_SCHEDULABLE = ("cpu", "memory", "ephemeral-storage")


class Kubelet:
    def __init__(
        self,
        api: Emulator,
        runtime: Runtime,
        cluster: plans.Cluster,
        security: Security,
        images: Callable[[str], LocalImage] = load_host_image,
    ) -> None:
        self.api = api
        self.images = images  # image name -> the image to run (host mode or built, store.py)
        self.runtime = runtime
        self.cluster = cluster
        self.security = security
        self.recorder = Recorder(api, "kubelet", NODE)
        self.scheduler = Recorder(api, "default-scheduler")
        self.workers: dict[str, PodWorker] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._unschedulable: dict[str, str] = {}

    # --- reading and writing the API ------------------------------------------------------------

    def lookup(self, plural: str, namespace: str, name: str) -> JSON | None:
        return self.api.find(plural, name, namespace)

    def set_status(self, pod: JSON, status: JSON) -> None:
        meta = pod["metadata"]
        current = self.api.find("pods", meta["name"], meta["namespace"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return
        # Conditions others set (DisruptionTarget, by an eviction) stay, as the kubelet's
        # status manager keeps them.
        mine = {c["type"] for c in status.get("conditions") or []}
        theirs = [
            c
            for c in (current.get("status") or {}).get("conditions") or []
            if c.get("type") not in mine
        ]
        if theirs:
            status = {**status, "conditions": [*status.get("conditions", []), *theirs]}
        with contextlib.suppress(ApiError):
            self.api.patch(
                "pods",
                meta["name"],
                [{"op": "add", "path": "/status", "value": status}],
                meta["namespace"],
                subresource="status",
            )

    # --- kubelet-managed files ------------------------------------------------------------------

    def kubelet_files(self, pod: JSON, pod_dir: Path) -> dict[str, Path]:
        """/etc/hosts, /etc/hostname, /etc/resolv.conf and the ServiceAccount token directory
        (unless automountServiceAccountToken is false on the pod or its account)."""
        pod_dir.mkdir(parents=True, exist_ok=True)
        meta, spec = pod["metadata"], pod.get("spec") or {}
        hosts, hostname, resolv = (
            pod_dir / "etc-hosts",
            pod_dir / "etc-hostname",
            pod_dir / "resolv",
        )
        hosts.touch()
        hostname.write_text(meta["name"][:63] + "\n")
        domain = self.cluster.cluster_domain
        namespace = meta["namespace"]
        # No nameserver: lookups of names /etc/hosts lacks fail at once (pods have no DNS).
        resolv.write_text(
            f"search {namespace}.svc.{domain} svc.{domain} {domain}\noptions ndots:5\n"
        )
        files = {"/etc/hosts": hosts, "/etc/hostname": hostname, "/etc/resolv.conf": resolv}
        account_name = spec.get("serviceAccountName") or "default"
        account = self.lookup("serviceaccounts", namespace, account_name)
        if account is None:
            raise ConfigError(
                "FailedMount",
                f'MountVolume.SetUp failed for volume "kube-api-access" : serviceaccount '
                f'"{account_name}" not found',
            )
        automount = spec.get("automountServiceAccountToken")
        if automount is None:
            automount = account.get("automountServiceAccountToken", True)
        if automount:
            token = self.security.service_account_token(namespace, account_name)
            files[plans.SA_DIR] = plans.write_service_account(self.cluster, pod, pod_dir, token)
        return files

    def services(self) -> dict[str, tuple[str, list[str]]]:
        """Service key `<name>.<namespace>` -> (namespace, addresses)."""
        pods = [p for p in self.api.list("pods") if (p.get("status") or {}).get("podIP")]
        found: dict[str, tuple[str, list[str]]] = {
            "kubernetes.default": ("default", [self.cluster.api_host])
        }
        for service in self.api.list("services"):
            meta, spec = service["metadata"], service.get("spec") or {}
            selector: Mapping[str, str] = spec.get("selector") or {}
            if not selector:
                continue
            headless = spec.get("clusterIP") == "None"
            # As the EndpointSlice controller: with publishNotReadyAddresses every pod counts,
            # terminating ones too (a Ray head in its grace period still serves its workers).
            everyone = bool(spec.get("publishNotReadyAddresses"))
            members = [
                p
                for p in pods
                if p["metadata"]["namespace"] == meta["namespace"]
                and all(
                    (p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items()
                )
                and (everyone or not p["metadata"].get("deletionTimestamp"))
            ]
            ready = [p for p in members if _ready(p)]
            chosen = members if headless and everyone else ready
            addresses = [p["status"]["podIP"] for p in chosen]
            found[f"{meta['name']}.{meta['namespace']}"] = (
                meta["namespace"],
                addresses if headless else addresses[:1],
            )
        return found

    def hosts_text(self, pod: JSON, ip: str, services: Mapping[str, tuple[str, list[str]]]) -> str:
        meta, domain = pod["metadata"], self.cluster.cluster_domain
        lines = [
            "# Kubernetes-managed hosts file (and the Services: the local substrate has no DNS)",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            f"{ip}\t{meta['name'][:63]}",
        ]
        for key, (namespace, addresses) in sorted(services.items()):
            name = key.split(".")[0]
            names = [f"{key}.svc.{domain}", f"{key}.svc", key]
            if namespace == meta["namespace"]:
                names.append(name)
            lines += [f"{address}\t{' '.join(names)}" for address in addresses]
        return "\n".join(lines) + "\n"

    def write_hosts(self, pod: JSON, pod_dir: Path, ip: str, services: Any = None) -> None:
        text = self.hosts_text(pod, ip, services if services is not None else self.services())
        path = pod_dir / "etc-hosts"
        if path.read_text() != text:
            with path.open("r+") as f:  # in place: containers have this inode bind-mounted
                f.write(text)
                f.truncate()

    # --- the sync loop --------------------------------------------------------------------------

    def _schedule(self, pod: JSON) -> None:
        """The scheduler's part: bind to this node, or say why the pod cannot run here."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        why = None
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            resources = c.get("resources") or {}
            for name in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}:
                if name not in _SCHEDULABLE and not name.startswith("hugepages-"):
                    why = f"0/1 nodes are available: 1 Insufficient {name}."
        for volume in spec.get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and self.lookup("persistentvolumeclaims", meta["namespace"], claim) is None:
                why = f'0/1 nodes are available: persistentvolumeclaim "{claim}" not found.'
        if why is not None:
            if self._unschedulable.get(meta["uid"]) != why:
                self._unschedulable[meta["uid"]] = why
                self.scheduler.record(pod, "Pod", "Warning", "FailedScheduling", why)
                condition = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": why,
                    "lastTransitionTime": now(),
                }
                self.set_status(pod, {"phase": "Pending", "conditions": [condition]})
            return
        self._unschedulable.pop(meta["uid"], None)
        with contextlib.suppress(ApiError):
            self.api.patch("pods", meta["name"], {"spec": {"nodeName": NODE}}, meta["namespace"])
            message = f"Successfully assigned {meta['namespace']}/{meta['name']} to {NODE}"
            self.scheduler.record(pod, "Pod", "Normal", "Scheduled", message)

    async def sync(self) -> None:
        pods = {p["metadata"]["uid"]: p for p in self.api.list("pods")}
        for uid, pod in pods.items():
            spec, meta = pod.get("spec") or {}, pod["metadata"]
            if not spec.get("nodeName"):
                if not meta.get("deletionTimestamp"):
                    self._schedule(pod)
                continue
            if spec["nodeName"] != NODE:
                continue
            if uid not in self.workers and not meta.get("deletionTimestamp"):
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue  # finished before this kubelet started: nothing to run
                worker = self.workers[uid] = PodWorker(self, pod)
                self.tasks[uid] = asyncio.create_task(worker.run())
            if meta.get("deletionTimestamp"):
                found = self.workers.get(uid)
                if found is not None and not self.tasks[uid].done():
                    found.stop(float(meta.get("deletionGracePeriodSeconds", 30)))
                else:
                    with contextlib.suppress(ApiError):  # stopped: finish the deletion
                        self.api.delete("pods", meta["name"], meta["namespace"], grace_period=0)
        for uid in [u for u in self.workers if u not in pods]:
            worker, task = self.workers[uid], self.tasks[uid]
            if not task.done():
                worker.stop(None)  # removed without a grace period: stop it with the pod's own
                continue
            del self.workers[uid], self.tasks[uid]
            shutil.rmtree(worker.dir, ignore_errors=True)
        services = self.services()
        for uid, worker in self.workers.items():
            if worker.sandbox is not None and uid in pods:
                self.write_hosts(worker.pod, worker.dir, worker.sandbox.ip, services)

    async def shutdown(self, grace: float) -> None:
        for worker in self.workers.values():
            worker.stop(grace)
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    # --- kubectl logs ---------------------------------------------------------------------------

    async def logs(
        self, namespace: str, name: str, query: Mapping[str, str]
    ) -> AsyncIterator[bytes]:
        pod = self.api.find("pods", name, namespace)
        worker = self.workers.get(pod["metadata"]["uid"]) if pod else None
        if pod is None or worker is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found on node {NODE}')
        everything = {c.name: c for c in [*worker.init, *worker.main]}
        wanted = query.get("container")
        if wanted is None and len(worker.main) == 1:
            wanted = worker.main[0].name
        if wanted not in everything:
            raise ApiError(
                400,
                "BadRequest",
                f"container {wanted} is not valid for pod {name}"
                if wanted
                else f"a container name must be specified for pod {name}, choose one of: "
                f"{[c.name for c in worker.main]} or one of the init containers: "
                f"{[c.name for c in worker.init]}",
            )
        c = everything[wanted]
        attempt = c.restarts - 1 if query.get("previous") in ("true", "1") else c.restarts
        path = worker.dir / "logs" / c.name / f"{max(attempt, 0)}.log"
        if not path.exists() and c.restarts and "running" not in c.state:
            path = worker.dir / "logs" / c.name / f"{c.restarts - 1}.log"
        data = path.read_bytes() if path.exists() else b""
        if query.get("tailLines", "").isdigit():
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[len(lines) - int(query["tailLines"]) :])
        if query.get("limitBytes", "").isdigit():
            data = data[: int(query["limitBytes"])]
        yield data
        if query.get("follow") not in ("true", "1"):
            return
        offset = path.stat().st_size if path.exists() else 0
        while True:
            await asyncio.sleep(0.2)
            size = path.stat().st_size if path.exists() else 0
            if size > offset:
                with path.open("rb") as f:
                    f.seek(offset)
                    yield f.read(size - offset)
                offset = size
            elif c.process is None or self.tasks[worker.uid].done():
                return


def _ready(pod: JSON) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )
