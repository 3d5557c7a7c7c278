"""Start/stop the emulator, register CRDs, write a kubeconfig, and act as other controllers.

The in-process helpers (`get`, `patch_status`, ...) go through the same store code as HTTP
requests (so watchers see their writes) but are not counted as API requests: they are what
KubeRay or a user would do, not the operator under test. Call them from the emulator's loop.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import functools
import os
import pathlib
import ssl
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from support.crd_schema import load_yaml_documents

from .accounting import Faults, RequestLog
from .rbac import Security
from .resources import Registry, ResourceInfo
from .selectors import field_matcher, label_matcher
from .server import ApiServer, PodLogs
from .store import JSON_PATCH, MERGE, Store, utc_now

JSON = dict[str, Any]
CrdSource = Mapping[str, Any] | str | os.PathLike[str]

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
OUR_CRD = REPO_ROOT / "crds" / "rlhf.dev_rlhfjobs.yaml"
OUR_PIPELINE_CRD = REPO_ROOT / "crds" / "rlhf.dev_rlhfpipelines.yaml"
KUBERAY_CRDS_DIR = pathlib.Path(
    os.environ.get("KUBERAY_CRDS_DIR", REPO_ROOT.parent / "shared" / "kuberay-crds")
)


@functools.lru_cache(maxsize=16)
def _parsed(path: str, mtime: float) -> tuple[JSON, ...]:
    return tuple(load_yaml_documents(path))


def load_crds(source: CrdSource) -> list[JSON]:
    """CRD dicts from a dict, a YAML file (parsed once per process) or a folder of YAML files."""
    if isinstance(source, Mapping):
        return [dict(source)]
    path = pathlib.Path(source)
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    docs = [doc for file in files for doc in _parsed(str(file), file.stat().st_mtime)]
    return [doc for doc in docs if doc.get("kind") == "CustomResourceDefinition"]


def project_crds() -> list[pathlib.Path]:
    """Our CRDs (once generated) and KubeRay's (when ../shared/kuberay-crds exists)."""
    found = [crd for crd in (OUR_CRD, OUR_PIPELINE_CRD) if crd.exists()]
    if KUBERAY_CRDS_DIR.is_dir():
        found.append(KUBERAY_CRDS_DIR)
    return found


@dataclass(frozen=True)
class EmittedEvent:
    """A Kubernetes Event from either API (`v1` or `events.k8s.io/v1`), normalised."""

    namespace: str
    kind: str  # of the object the event is about
    name: str
    type: str  # Normal | Warning
    reason: str
    message: str
    raw: Mapping[str, Any]


class Emulator:
    """An in-memory Kubernetes API server on loopback HTTP (see the package docstring)."""

    def __init__(self, *, clock: Callable[[], Any] = utc_now) -> None:
        self.registry = Registry()
        self.store = Store(self.registry, clock)
        self.requests = RequestLog()
        self.faults = Faults()
        self._server = ApiServer(self.store, self.requests, self.faults)
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.kubeconfig: pathlib.Path | None = None
        self.security: Security | None = None

    # --- lifecycle --------------------------------------------------------------------------

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        also_on: Iterable[tuple[str, int]] = (),
    ) -> str:
        """Serve on host:port (0: a free port), HTTPS with `ssl_context`, and on every other
        (address, port) of `also_on`, port 0 meaning the same port (e.g. the address pods reach
        the API through)."""
        self._runner = web.AppRunner(self._server.app(), handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context)
        await site.start()
        bound = self._runner.addresses[0]
        for other, other_port in also_on:
            site = web.TCPSite(self._runner, other, other_port or bound[1], ssl_context=ssl_context)
            await site.start()
        scheme = "https" if ssl_context is not None else "http"
        self.url = f"{scheme}://{bound[0]}:{bound[1]}"
        return self.url

    def enable_security(self) -> Security:
        """Turn on bearer-token authentication and RBAC (rbac.py) for every HTTP request."""

        def lookup(group: str, plural: str, namespace: str | None, name: str) -> JSON | None:
            info = self.registry.storage_info(group, plural)
            return None if info is None else self.store.find(info, namespace, name)

        def lister(group: str, plural: str) -> Iterable[JSON]:
            info = self.registry.storage_info(group, plural)
            return [] if info is None else list(self.store.items(info))

        self.security = self._server.security = Security(lookup, lister)
        return self.security

    @property
    def pod_logs(self) -> PodLogs | None:
        """Who serves `pods/<name>/log` (a kubelet); None answers 404."""
        return self._server.pod_logs

    @pod_logs.setter
    def pod_logs(self, provider: PodLogs | None) -> None:
        self._server.pod_logs = provider

    async def stop(self) -> None:
        self.store.close_watchers()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def write_kubeconfig(
        self,
        path: str | os.PathLike[str],
        *,
        token: str = "emulator",
        ca_file: str | os.PathLike[str] | None = None,
        namespace: str = "default",
    ) -> pathlib.Path:
        """A kubeconfig for kubectl, the `kubernetes` client and `kopf.login_with_kubeconfig`."""
        cluster: JSON = {"server": self.url}
        if ca_file is not None:
            cluster["certificate-authority"] = str(ca_file)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": cluster}],
            "users": [{"name": "emulator", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "emulator",
                    "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace},
                }
            ],
            "current-context": "emulator",
        }
        self.kubeconfig = pathlib.Path(path)
        self.kubeconfig.write_text(yaml.safe_dump(config))
        return self.kubeconfig

    # --- setup ------------------------------------------------------------------------------

    def register_crds(self, *sources: CrdSource) -> list[ResourceInfo]:
        """Create CRDs (dicts, YAML files or folders); returns the resources they serve."""
        infos = []
        crd_info = self.registry.resolve("customresourcedefinitions.apiextensions.k8s.io")
        for source in sources:
            for crd in load_crds(source):
                self.store.create(crd_info, None, copy.deepcopy(crd))
                spec = crd["spec"]
                infos += [
                    i
                    for i in self.registry.all()
                    if i.group_resource == (spec["group"], spec["names"]["plural"])
                ]
        return infos

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> JSON:
        body = {"metadata": {"name": name, "labels": dict(labels or {})}}
        return self.create("namespaces", body)

    # --- acting as another controller (not counted as API requests) ------------------------

    def find(self, resource: str, name: str, namespace: str | None = None) -> JSON | None:
        obj = self.store.find(self.registry.resolve(resource), namespace, name)
        return copy.deepcopy(obj) if obj is not None else None

    def get(self, resource: str, name: str, namespace: str | None = None) -> JSON:
        return copy.deepcopy(self.store.get(self.registry.resolve(resource), namespace, name))

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[JSON]:
        items, _, _ = self.store.select(
            self.registry.resolve(resource),
            namespace,
            label_matcher(label_selector),
            field_matcher(field_selector),
        )
        return copy.deepcopy(items)

    def create(self, resource: str, body: Mapping[str, Any], namespace: str | None = None) -> JSON:
        info = self.registry.resolve(resource)
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        owned = copy.deepcopy(dict(body))  # the store takes ownership of what it is given
        obj, _ = self.store.create(info, namespace if info.namespaced else None, owned)
        return copy.deepcopy(obj)

    def patch(
        self,
        resource: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> JSON:
        """A merge patch (a dict) or a JSON patch (a list of operations)."""
        content_type = JSON_PATCH if isinstance(patch, list) else MERGE
        obj, _, _ = self.store.patch(
            self.registry.resolve(resource),
            namespace,
            name,
            content_type,
            patch,
            subresource=subresource,
        )
        return copy.deepcopy(obj)

    def patch_status(
        self, resource: str, name: str, status: Mapping[str, Any], namespace: str | None = None
    ) -> JSON:
        """Merge `status` into the object's status, as KubeRay does to its RayJobs."""
        return self.patch(resource, name, {"status": dict(status)}, namespace, subresource="status")

    def delete(
        self,
        resource: str,
        name: str,
        namespace: str | None = None,
        *,
        grace_period: int | None = None,
        propagation: str | None = None,
    ) -> JSON:
        obj, _ = self.store.delete(
            self.registry.resolve(resource),
            namespace,
            name,
            grace_period=grace_period,
            propagation=propagation,
        )
        return copy.deepcopy(obj)

    def events(
        self, namespace: str | None = None, *, about: str | None = None
    ) -> builtins.list[EmittedEvent]:
        """Events posted through either Events API, oldest first; `about` filters by name."""
        found = []
        for api in ("v1/events", "events.k8s.io/v1/events"):
            for raw in self.list(api, namespace):
                subject = raw.get("involvedObject") or raw.get("regarding") or {}
                found.append(
                    EmittedEvent(
                        namespace=raw["metadata"].get("namespace", ""),
                        kind=subject.get("kind", ""),
                        name=subject.get("name", ""),
                        type=raw.get("type", ""),
                        reason=raw.get("reason", ""),
                        message=raw.get("message") or raw.get("note") or "",
                        raw=raw,
                    )
                )
        found.sort(key=lambda e: int(e.raw["metadata"]["resourceVersion"]))
        return [e for e in found if about is None or e.name == about]

    async def wait_for(
        self,
        predicate: Callable[[], Any],
        *,
        timeout: float = 10.0,
        interval: float = 0.02,
        what: str = "condition",
    ) -> Any:
        """Poll an in-process predicate (no HTTP) until it returns something truthy."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not (result := predicate()):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{what} not reached within {timeout} s")
            await asyncio.sleep(interval)
        return result


@contextlib.asynccontextmanager
async def run_emulator(
    *,
    crds: Iterable[CrdSource] = (),
    namespaces: Iterable[str] = ("default",),
    kubeconfig: str | os.PathLike[str] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> AsyncIterator[Emulator]:
    """Start an emulator on a free loopback port with CRDs and namespaces; stop it after."""
    emulator = Emulator()
    await emulator.start(host, port)
    try:
        emulator.register_crds(*crds)
        for namespace in namespaces:
            emulator.create_namespace(namespace)
        if kubeconfig is not None:
            emulator.write_kubeconfig(kubeconfig)
        yield emulator
    finally:
        await emulator.stop()
