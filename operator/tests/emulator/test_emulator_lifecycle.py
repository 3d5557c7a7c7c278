"""Schema validation, finalizers, garbage collection, namespaces, CRDs, events, accounting,
faults, and compatibility with the `kubernetes` client."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from emulator import OUR_CRD, Emulator, run_emulator
from emulator.testkit import GROUP, WIDGETS, Api, widget, widget_crd, widgets_path

CM_PATH = "/api/v1/namespaces/default/configmaps"


# --- custom resource validation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"size": "big"}, "spec.size", 'Invalid value: "big": must be of type integer'),
        ({"size": 0}, "spec.size", "Invalid value: 0: 0 is less than the minimum of 1"),
        ({}, "spec.size", "Required value"),
        (
            {"size": 1, "mode": "warp"},
            "spec.mode",
            'Unsupported value: "warp": supported values: "fast", "slow"',
        ),
        (
            {"size": 1, "port": 1.5},
            "spec.port",
            "Invalid value: 1.5: 1.5 is not valid under any of the given schemas",
        ),
        (
            {"size": 1, "tags": ["a", "a"]},
            "spec.tags[1]",
            'Duplicate value: "a"',
        ),
        (
            {"size": 1, "ports": [{"name": "a"}, {"name": "a", "number": 2}]},
            "spec.ports[1]",
            'Duplicate value: {"name": "a"}',
        ),
        (
            {"size": 1, "limits": {"cpu": 2}},
            "spec.limits.cpu",
            "Invalid value: 2: must be of type string",
        ),
        ({"size": 1, "template": {"spec": {}}}, "spec.template.apiVersion", "Required value"),
    ],
    ids=[
        "type",
        "minimum",
        "required",
        "enum",
        "int-or-string",
        "list-set",
        "list-map",
        "map-values",
        "embedded-resource",
    ],
)
async def test_invalid_custom_resources_are_422_naming_the_field(
    api: Api, spec: dict[str, Any], field: str, message: str
) -> None:
    body = widget("w") | {"spec": spec}
    reply = await api.post(widgets_path(), body)
    assert reply.status == 422, reply.body
    assert reply.body["reason"] == "Invalid"
    causes = [(c["field"], c["message"]) for c in reply.body["details"]["causes"]]
    assert (field, message) in causes
    assert reply.body["message"].startswith(f'Widget.{GROUP} "w" is invalid: ')


@pytest.mark.parametrize(
    "spec",
    [
        {"size": 1, "port": 80},
        {"size": 1, "port": "http"},
        {"size": 1, "note": None},
        {"size": 1, "extra": {"anything": {"goes": [1]}}},
        {
            "size": 1,
            "template": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"replicas": 2},
            },
        },
    ],
    ids=["int", "string", "nullable", "preserve-unknown", "embedded"],
)
async def test_valid_schema_extensions_are_accepted_as_sent(api: Api, spec: dict[str, Any]) -> None:
    reply = await api.post(widgets_path(), widget("w") | {"spec": spec})
    assert reply.status == 201, reply.body
    assert reply.body["spec"] == spec | {"mode": "fast"}


async def test_defaults_are_applied(api: Api) -> None:
    reply = await api.post(widgets_path(), widget("w"))
    assert reply.body["spec"] == {"size": 1, "mode": "fast"}


async def test_unknown_fields_are_pruned_with_a_warning(api: Api) -> None:
    reply = await api.post(widgets_path(), widget("w", colour="red"))
    assert reply.status == 201 and "colour" not in reply.body["spec"]
    assert reply.headers.getall("Warning") == ['299 - "unknown field \\"spec.colour\\""']


async def test_unknown_fields_are_400_in_strict_mode(api: Api) -> None:
    reply = await api.post(widgets_path(), widget("w", colour="red"), fieldValidation="Strict")
    assert reply.status == 400
    assert reply.body["message"] == 'strict decoding error: unknown field "spec.colour"'


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"name": "Bad_Name"}, "metadata.name"),
        ({"generateName": ""}, "metadata.name"),
        ({"name": "ok", "labels": {"k": "x" * 64}}, "metadata.labels"),
        ({"name": "ok", "labels": {"bad key!": "v"}}, "metadata.labels"),
        (
            {"name": "ok", "ownerReferences": [{"kind": "X"}]},
            "metadata.ownerReferences[0].apiVersion",
        ),
    ],
    ids=["name", "no-name", "label-value", "label-key", "owner-reference"],
)
async def test_invalid_metadata_is_422(api: Api, metadata: dict[str, Any], field: str) -> None:
    reply = await api.post(CM_PATH, {"metadata": metadata})
    assert reply.status == 422
    assert field in [c["field"] for c in reply.body["details"]["causes"]]


async def test_kuberay_rayjob_is_validated_pruned_and_defaulted(
    tmp_path: pathlib.Path, kuberay_crds_dir: pathlib.Path
) -> None:
    async with run_emulator(crds=[kuberay_crds_dir]) as k8s:
        job = {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "j"},
            "spec": {"entrypoint": "python -m x", "shutdownAfterJobFinish": True},
        }
        created = k8s.create("rayjobs.ray.io", job, "default")
        assert "shutdownAfterJobFinish" not in created["spec"]  # a typo is silently pruned
        assert created["spec"]["submissionMode"] == "K8sJobMode"  # KubeRay's default
        bad = job | {
            "spec": {
                "rayClusterSpec": {
                    "headGroupSpec": {
                        "rayStartParams": {"num-cpus": 1},
                        "template": {"spec": {"containers": []}},
                    }
                }
            }
        }
        with pytest.raises(Exception, match=r"rayStartParams.num-cpus: Invalid value: 1"):
            k8s.create("rayjobs.ray.io", bad | {"metadata": {"name": "bad"}}, "default")


# --- deletion: finalizers, garbage collection, namespaces, CRDs ----------------------------


async def test_finalizers_hold_deletion_until_removed(api: Api) -> None:
    await api.post(
        widgets_path(),
        widget("w") | {"metadata": {"name": "w", "finalizers": ["rlhf.dev/finalizer"]}},
    )
    deleting = await api.delete(widgets_path(name="w"))
    assert deleting.status == 200 and deleting.body["metadata"]["deletionTimestamp"]
    assert deleting.body["metadata"]["generation"] == 2
    still = await api.get(widgets_path(name="w"))
    assert still.status == 200
    added = await api.patch(
        widgets_path(name="w"), {"metadata": {"finalizers": ["a.dev/x", "rlhf.dev/finalizer"]}}
    )
    assert added.status == 422  # no new finalizers on an object being deleted
    removed = await api.patch(
        widgets_path(name="w"),
        [{"op": "remove", "path": "/metadata/finalizers"}],
        "application/json-patch+json",
    )
    assert removed.status == 200
    assert (await api.get(widgets_path(name="w"))).status == 404


def owned_by(obj: dict[str, Any]) -> list[dict[str, Any]]:
    meta = obj["metadata"]
    return [
        {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


async def test_owner_deletion_cascades_recursively(k8s: Emulator, api: Api) -> None:
    owner = (await api.post(widgets_path(), widget("owner"))).body
    child = (
        await api.post(CM_PATH, {"metadata": {"name": "child", "ownerReferences": owned_by(owner)}})
    ).body
    await api.post(
        "/api/v1/namespaces/default/secrets",
        {"metadata": {"name": "grandchild", "ownerReferences": owned_by(child)}},
    )
    await api.post(CM_PATH, {"metadata": {"name": "bystander"}})
    await api.delete(widgets_path(name="owner"))
    assert k8s.find("configmaps", "child", "default") is None
    assert k8s.find("secrets", "grandchild", "default") is None
    assert k8s.find("configmaps", "bystander", "default") is not None


async def test_dependent_with_another_live_owner_survives(k8s: Emulator, api: Api) -> None:
    first = (await api.post(widgets_path(), widget("first"))).body
    second = (await api.post(widgets_path(), widget("second"))).body
    refs = [*owned_by(first), owned_by(second)[0] | {"controller": False}]
    await api.post(CM_PATH, {"metadata": {"name": "shared", "ownerReferences": refs}})
    await api.delete(widgets_path(name="first"))
    survivor = k8s.get("configmaps", "shared", "default")
    assert [r["name"] for r in survivor["metadata"]["ownerReferences"]] == ["second"]


async def test_orphan_propagation_keeps_dependents(k8s: Emulator, api: Api) -> None:
    owner = (await api.post(widgets_path(), widget("owner"))).body
    await api.post(CM_PATH, {"metadata": {"name": "child", "ownerReferences": owned_by(owner)}})
    await api.delete(widgets_path(name="owner"), propagationPolicy="Orphan")
    assert "ownerReferences" not in k8s.get("configmaps", "child", "default")["metadata"]


async def test_dependents_with_finalizers_wait_for_them(k8s: Emulator, api: Api) -> None:
    owner = (await api.post(widgets_path(), widget("owner"))).body
    await api.post(
        CM_PATH,
        {
            "metadata": {
                "name": "child",
                "finalizers": ["x.dev/f"],
                "ownerReferences": owned_by(owner),
            }
        },
    )
    await api.delete(widgets_path(name="owner"))
    assert k8s.get("configmaps", "child", "default")["metadata"]["deletionTimestamp"]


async def test_namespace_deletion_removes_its_contents(k8s: Emulator, api: Api) -> None:
    await api.post("/api/v1/namespaces", {"metadata": {"name": "doomed"}})
    await api.post("/api/v1/namespaces/doomed/configmaps", {"metadata": {"name": "c"}})
    await api.delete("/api/v1/namespaces/doomed")
    assert k8s.find("configmaps", "c", "doomed") is None
    assert (await api.get("/api/v1/namespaces/doomed")).status == 404


async def test_crds_created_over_http_become_served_and_go_away(k8s: Emulator, api: Api) -> None:
    crd = widget_crd()
    crd["metadata"]["name"] = "gadgets.emulator-test.rlhf.dev"
    crd["spec"]["names"] = {"plural": "gadgets", "kind": "Gadget"}
    reply = await api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert reply.status == 201
    conditions = {c["type"]: c["status"] for c in reply.body["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    gadgets = f"/apis/{GROUP}/v1/namespaces/default/gadgets"
    assert (
        await api.post(gadgets, {"kind": "Gadget", "metadata": {"name": "g"}, "spec": {"size": 1}})
    ).status == 201
    await api.delete(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.emulator-test.rlhf.dev"
    )
    assert (await api.get(gadgets)).status == 404
    assert "gadgets" not in {
        r["name"] for r in (await api.get(f"/apis/{GROUP}/v1")).body["resources"]
    }


# --- events, accounting, faults -------------------------------------------------------------


async def test_events_from_both_apis_are_stored_and_readable(k8s: Emulator, api: Api) -> None:
    await api.post(
        "/api/v1/namespaces/default/events",
        {
            "metadata": {"generateName": "kopf-event-"},
            "type": "Normal",
            "reason": "Created",
            "message": "job created",
            "involvedObject": {"kind": "Widget", "name": "w"},
        },
    )
    await api.post(
        "/apis/events.k8s.io/v1/namespaces/default/events",
        {
            "metadata": {"name": "e2"},
            "type": "Warning",
            "reason": "Failed",
            "note": "it broke",
            "regarding": {"kind": "Widget", "name": "w"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "x",
            "reportingInstance": "y",
            "action": "Fail",
        },
    )
    assert [(e.kind, e.name, e.type, e.reason, e.message) for e in k8s.events(about="w")] == [
        ("Widget", "w", "Normal", "Created", "job created"),
        ("Widget", "w", "Warning", "Failed", "it broke"),
    ]


async def test_requests_are_counted_per_verb_and_resource(k8s: Emulator, api: Api) -> None:
    mark = k8s.requests.mark()
    await api.post(widgets_path(), widget("w"))
    await api.get(widgets_path(name="w"))
    await api.patch(widgets_path(name="w") + "/status", {"status": {"phase": "x"}})
    await api.get(widgets_path())
    await api.get("/apis")
    assert k8s.requests.counts(since=mark) == {
        ("create", WIDGETS): 1,
        ("get", WIDGETS): 1,
        ("patch", f"{WIDGETS}/status"): 1,
        ("list", WIDGETS): 1,
        ("get", "discovery"): 1,
    }


async def test_injected_faults_fail_matching_requests(k8s: Emulator, api: Api) -> None:
    k8s.faults.add("create", "configmaps", code=500, times=1)
    assert (await api.post(CM_PATH, {"metadata": {"name": "a"}})).status == 500
    assert (await api.post(CM_PATH, {"metadata": {"name": "a"}})).status == 201


# --- the official client --------------------------------------------------------------------


async def test_kubernetes_client_works_against_the_emulator(
    k8s: Emulator, tmp_path: pathlib.Path
) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    config = k8s.write_kubeconfig(tmp_path / "kubeconfig")

    def as_a_client() -> list[str]:
        client = kubernetes.config.new_client_from_config(config_file=str(config))
        core, custom = (
            kubernetes.client.CoreV1Api(client),
            kubernetes.client.CustomObjectsApi(client),
        )
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": "c", "labels": {"a": "b"}}, "data": {"k": "v"}}
        )
        core.patch_namespaced_config_map("c", "default", {"data": {"k": "w"}})  # strategic merge
        custom.create_namespaced_custom_object(GROUP, "v1", "default", "widgets", widget("w"))
        custom.patch_namespaced_custom_object_status(
            GROUP, "v1", "default", "widgets", "w", {"status": {"phase": "Running"}}
        )
        found = core.list_namespaced_config_map("default", label_selector="a=b").items
        phase = custom.get_namespaced_custom_object(GROUP, "v1", "default", "widgets", "w")
        return [found[0].data["k"], phase["status"]["phase"]]

    assert await asyncio.to_thread(as_a_client) == ["w", "Running"]


async def test_the_shared_fixture_serves_the_project_crds(
    emulator: Emulator, kuberay_crds_dir: pathlib.Path
) -> None:
    """`emulator` (operator/tests/conftest.py) is what the operator's integration tests use."""
    served = {info.qualified for info in emulator.registry.all()}
    assert {"rayjobs.ray.io", "rayclusters.ray.io"} <= served
    assert ("rlhfjobs.rlhf.dev" in served) == OUR_CRD.exists()
    assert emulator.kubeconfig is not None and emulator.kubeconfig.exists()


async def test_protobuf_bodies_are_415(api: Api) -> None:
    """JSON only: kubectl >= 1.35 `create configmap` sends protobuf and gets this answer."""
    reply = await api.request(
        "POST", CM_PATH, "k8s\x00", content_type="application/vnd.kubernetes.protobuf"
    )
    assert reply.status == 415 and reply.body["reason"] == "UnsupportedMediaType"
