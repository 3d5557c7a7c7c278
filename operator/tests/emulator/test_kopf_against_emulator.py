"""The real kopf operator, in-loop, against the emulator over HTTP: the proof the emulator is
enough for kopf. A throwaway CRD with a strict schema and a status subresource; kopf keeps its
progress and diff-base in `rlhf.dev/` annotations, as the real operator does."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import pytest

from emulator import Emulator, run_emulator

GROUP = "kopf-test.rlhf.dev"
GADGETS = f"gadgets.{GROUP}"
FINALIZER = "rlhf.dev/finalizer"

GADGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": GADGETS},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                # Strict: no preserve-unknown-fields anywhere, so `status.kopf` would be pruned.
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string"},
                                    "child": {"type": "string"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


def gadget_operator(url: str, deleted: list[str]) -> kopf.OperatorRegistry:
    """A tiny operator: a child ConfigMap per Gadget, status set, a finalizer for deletion."""
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="rlhf.dev")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="rlhf.dev", key="last-handled-configuration"
        )
        settings.persistence.finalizer = FINALIZER
        settings.watching.server_timeout = 60

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_kubeconfig(**kwargs)  # reads KUBECONFIG, written by the emulator

    @kopf.on.create(GROUP, "v1", "gadgets", registry=registry)
    async def create_child(
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        namespace: str | None,
        patch: kopf.Patch,
        **_: Any,
    ) -> None:
        child: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-child"},
            "data": {"size": str(spec["size"])},
        }
        kopf.adopt(child, owner=body)
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{url}/api/v1/namespaces/{namespace}/configmaps", json=child) as reply,
        ):
            if reply.status != 201:
                raise kopf.TemporaryError(f"child not created: {await reply.text()}", delay=1)
        patch.status["phase"] = "Ready"
        patch.status["child"] = child["metadata"]["name"]
        kopf.info(body, reason="ChildCreated", message=f"created ConfigMap {name}-child")

    @kopf.on.delete(GROUP, "v1", "gadgets", registry=registry)
    def note_deletion(name: str, **_: Any) -> None:
        deleted.append(name)

    return registry


@contextlib.asynccontextmanager
async def in_another_thread(registry: kopf.OperatorRegistry, **options: Any) -> AsyncIterator[None]:
    """kopf in its own thread and loop, as a second replica would be in its own pod.

    Two kopf operators must not share a loop: each one stops the other's tasks as "hung" ones.
    """
    stop, ready = threading.Event(), threading.Event()

    def serve() -> None:
        asyncio.run(
            kopf.operator(
                registry=registry, clusterwide=True, stop_flag=stop, ready_flag=ready, **options
            )
        )

    thread = threading.Thread(target=serve, name="kopf-replica", daemon=True)
    thread.start()
    try:
        if not await asyncio.to_thread(ready.wait, 10):
            raise TimeoutError("the second kopf replica did not start within 10 s")
        yield
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 15)


@contextlib.asynccontextmanager
async def running(registry: kopf.OperatorRegistry, **options: Any) -> AsyncIterator[None]:
    """kopf in this loop: standalone (no peering) unless `peering_name=` is given."""
    stop, ready = asyncio.Event(), asyncio.Event()
    options.setdefault("standalone", "peering_name" not in options)
    task = asyncio.create_task(
        kopf.operator(
            registry=registry, clusterwide=True, stop_flag=stop, ready_flag=ready, **options
        )
    )
    try:
        await asyncio.wait_for(ready.wait(), timeout=10)
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


@pytest.fixture
async def k8s(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Emulator]:
    kubeconfig = tmp_path / "kubeconfig"
    async with run_emulator(crds=[GADGET_CRD], kubeconfig=kubeconfig) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        yield emulator


def gadget(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Gadget",
        "metadata": {"name": name},
        "spec": {"size": 3},
    }


async def test_kopf_creates_adopts_reports_and_cleans_up(k8s: Emulator) -> None:
    deleted: list[str] = []
    async with running(gadget_operator(k8s.url, deleted)):
        k8s.create(GADGETS, gadget("g1"), "default")

        # create -> child ConfigMap owned by the Gadget, status patched through /status
        child = await k8s.wait_for(lambda: k8s.find("configmaps", "g1-child", "default"))
        owner = k8s.get(GADGETS, "g1", "default")
        assert child["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
        ready = await k8s.wait_for(
            lambda: (
                k8s.get(GADGETS, "g1", "default").get("status", {}).get("phase") == "Ready"
                and k8s.get(GADGETS, "g1", "default")
            )
        )
        assert ready["status"] == {"phase": "Ready", "child": "g1-child"}  # nothing of kopf's
        assert ready["metadata"]["finalizers"] == [FINALIZER]
        assert "rlhf.dev/last-handled-configuration" in ready["metadata"]["annotations"]
        assert ready["metadata"]["generation"] == 1
        assert k8s.requests.count("patch", f"{GADGETS}/status") >= 1

        # kopf.info() events arrive through the core Events API, about the right object
        [event] = await k8s.wait_for(lambda: k8s.events(about="g1"), what="kopf's event")
        assert (event.kind, event.type, event.reason) == ("Gadget", "Normal", "ChildCreated")
        assert event.message == "created ConfigMap g1-child"

        # idle: no requests at all beyond the open watches
        mark = k8s.requests.mark()
        await asyncio.sleep(1.0)
        assert k8s.requests.counts(since=mark) == {}

        # delete -> kopf's deletion handler runs, its finalizer goes, the child is collected
        k8s.delete(GADGETS, "g1", "default")
        await k8s.wait_for(lambda: k8s.find(GADGETS, "g1", "default") is None, what="deletion")
        assert deleted == ["g1"]
        assert k8s.find("configmaps", "g1-child", "default") is None

    failed = [(r.verb, r.resource, r.code) for r in k8s.requests.records if r.code >= 400]
    assert failed == []  # kopf never had to retry: no conflicts, no invalid patches


async def test_kopf_picks_up_objects_that_exist_before_it_starts(k8s: Emulator) -> None:
    names = ("early-1", "early-2")
    for name in names:
        k8s.create(GADGETS, gadget(name), "default")
    async with running(gadget_operator(k8s.url, [])):
        await k8s.wait_for(
            lambda: all(k8s.find("configmaps", f"{n}-child", "default") for n in names),
            what="children of the objects created before the operator started",
        )


def peering_crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    """kopf's peering resources: no spec, a free-form status of keep-alives."""
    status = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "group": "kopf.dev",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "properties": {"status": status}}
                    },
                }
            ],
        },
    }


async def test_two_peered_replicas_only_the_higher_priority_one_works(k8s: Emulator) -> None:
    k8s.register_crds(
        peering_crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"),
        peering_crd("KopfPeering", "kopfpeerings", "Namespaced"),
    )
    k8s.create("clusterkopfpeerings.kopf.dev", {"metadata": {"name": "rlhf-operator"}})
    handled: dict[str, list[str]] = {"leader": [], "standby": []}

    def replica(identity: str) -> kopf.OperatorRegistry:
        registry = gadget_operator(k8s.url, [])

        @kopf.on.create(GROUP, "v1", "gadgets", registry=registry, id="track")
        def track(name: str, **_: Any) -> None:
            handled[identity].append(name)

        return registry

    def keepalives() -> dict[str, Any]:
        return k8s.get("clusterkopfpeerings.kopf.dev", "rlhf-operator").get("status") or {}

    def open_gadget_watches() -> int:
        return len(k8s.store.watchers_of(k8s.registry.resolve(GADGETS)))

    peering = {"peering_name": "rlhf-operator"}
    async with running(replica("leader"), identity="leader", priority=100, **peering):
        await k8s.wait_for(lambda: "leader" in keepalives(), what="the leader's keep-alive")
        async with in_another_thread(
            replica("standby"), identity="standby", priority=50, **peering
        ):
            await k8s.wait_for(lambda: "standby" in keepalives(), what="the standby's keep-alive")
            assert {peer: alive["priority"] for peer, alive in keepalives().items()} == {
                "leader": 100,
                "standby": 50,
            }
            await asyncio.sleep(0.5)  # time enough for a wrongly active standby to start watching
            assert open_gadget_watches() == 1  # the standby is paused: it does not even watch
            k8s.create(GADGETS, gadget("g1"), "default")
            await k8s.wait_for(lambda: k8s.find("configmaps", "g1-child", "default"))
            await asyncio.sleep(0.5)  # time enough for a wrongly active standby to act too
    assert handled == {"leader": ["g1"], "standby": []}
