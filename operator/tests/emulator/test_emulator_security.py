"""What the local substrate needs of the emulator beyond the operator's tests: bearer-token
authentication, RBAC as kube-apiserver enforces it (escalation prevention included), graceful
pod deletion, kubelet logs, the OpenAPI discovery kubectl validates against, and the protobuf
bodies of kubectl's imperative `create`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest

from emulator import Emulator, run_emulator
from emulator.rbac import Security
from emulator.testkit import Api

RBAC = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"
PODS = "/api/v1/namespaces/default/pods"


def role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": "default"},
        "rules": list(rules),
    }


def binding(name: str, role_name: str, account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "default"}],
    }


@pytest.fixture
async def secured() -> AsyncIterator[tuple[Emulator, Security]]:
    async with run_emulator() as emulator:
        yield emulator, emulator.enable_security()


def client(emulator: Emulator, token: str | None) -> Api:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Api(aiohttp.ClientSession(headers=headers), emulator.url)


async def test_requests_need_a_known_token(secured: tuple[Emulator, Security]) -> None:
    emulator, security = secured
    admin = security.add_user("admin", ["system:masters"])
    for token, code in ((None, 401), ("forged", 401), (admin, 200)):
        api = client(emulator, token)
        try:
            assert (await api.get("/api/v1/namespaces/default/configmaps")).status == code
        finally:
            await api.session.close()


async def test_rbac_allows_what_the_bound_role_grants_and_words_denials_like_the_server(
    secured: tuple[Emulator, Security],
) -> None:
    emulator, security = secured
    emulator.create("serviceaccounts", {"metadata": {"name": "trainer"}}, "default")
    emulator.create("configmaps", {"metadata": {"name": "cm"}, "data": {}}, "default")
    emulator.create(
        "rbac.authorization.k8s.io/v1/roles",
        role(
            "reader",
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get"],
                "resourceNames": ["cm"],
            },
        ),
        "default",
    )
    emulator.create(
        "rbac.authorization.k8s.io/v1/rolebindings",
        binding("reader", "reader", "trainer"),
        "default",
    )
    api = client(emulator, security.service_account_token("default", "trainer"))
    try:
        assert (await api.get("/api/v1/namespaces/default/configmaps/cm")).status == 200
        denied = await api.get("/api/v1/namespaces/default/configmaps")
        assert denied.status == 403
        assert denied.body["message"] == (
            'configmaps is forbidden: User "system:serviceaccount:default:trainer" cannot list '
            'resource "configmaps" in API group "" in the namespace "default"'
        )
        status = await api.patch("/api/v1/namespaces/default/configmaps/cm", {"data": {"a": "b"}})
        assert status.status == 403
    finally:
        await api.session.close()


async def test_a_service_account_token_dies_with_its_account(
    secured: tuple[Emulator, Security],
) -> None:
    emulator, security = secured
    emulator.create("serviceaccounts", {"metadata": {"name": "gone"}}, "default")
    token = security.service_account_token("default", "gone")
    emulator.delete("serviceaccounts", "gone", "default")
    emulator.create("serviceaccounts", {"metadata": {"name": "gone"}}, "default")  # new uid
    api = client(emulator, token)
    try:
        assert (await api.get("/api")).status == 401
    finally:
        await api.session.close()


async def test_a_subject_grants_only_what_it_holds(secured: tuple[Emulator, Security]) -> None:
    emulator, security = secured
    emulator.create("serviceaccounts", {"metadata": {"name": "operator"}}, "default")
    emulator.create(
        "rbac.authorization.k8s.io/v1/roles",
        role(
            "writer",
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["roles"],
                "verbs": ["create"],
            },
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
        ),
        "default",
    )
    emulator.create(
        "rbac.authorization.k8s.io/v1/rolebindings",
        binding("writer", "writer", "operator"),
        "default",
    )
    api = client(emulator, security.service_account_token("default", "operator"))
    try:
        held = role("ok", {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]})
        assert (await api.post(f"{RBAC}/roles", held)).status == 201
        more = role("escalates", {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
        refused = await api.post(f"{RBAC}/roles", more)
        assert refused.status == 403
        assert "attempting to grant RBAC permissions not currently held" in refused.body["message"]
    finally:
        await api.session.close()


async def test_a_bound_pod_is_deleted_gracefully_until_its_kubelet_finishes(
    api: Api, k8s: Emulator
) -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"nodeName": "node", "containers": [{"name": "c", "image": "i"}]},
    }
    assert (await api.post(PODS, pod)).status == 201
    assert (await api.delete(f"{PODS}/p")).status == 200
    terminating = (await api.get(f"{PODS}/p")).body
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
    assert (await api.delete(f"{PODS}/p", gracePeriodSeconds="0")).status == 200
    assert (await api.get(f"{PODS}/p")).status == 404


async def test_an_eviction_marks_the_pod_a_disruption_target_then_deletes_it_gracefully(
    api: Api,
) -> None:
    """policy/v1 Eviction, as a node drain or Kueue sends it."""
    pod = {
        "metadata": {"name": "p"},
        "spec": {"nodeName": "node", "containers": [{"name": "c", "image": "i"}]},
    }
    assert (await api.post(PODS, pod)).status == 201
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": 5},
    }
    evicted = await api.post(f"{PODS}/p/eviction", eviction)
    assert (evicted.status, evicted.body["status"]) == (201, "Success")
    terminating = (await api.get(f"{PODS}/p")).body
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 5
    [target] = [c for c in terminating["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"]) == ("True", "EvictionByEvictionAPI")
    assert (await api.post(f"{PODS}/gone/eviction", eviction)).status == 404
    listed = (await api.get("/api/v1")).body["resources"]
    [sub] = [r for r in listed if r["name"] == "pods/eviction"]
    assert (sub["kind"], sub["verbs"]) == ("Eviction", ["create"])


async def test_pod_logs_come_from_the_kubelet(api: Api, k8s: Emulator) -> None:
    async def logs(namespace: str, name: str, query: Mapping[str, str]) -> AsyncIterator[bytes]:
        yield f"{namespace}/{name} container={query.get('container')}\n".encode()

    assert (
        await api.post(PODS, {"metadata": {"name": "p"}, "spec": {"containers": []}})
    ).status == 201
    assert (await api.get(f"{PODS}/p/log")).status == 404  # no kubelet serves logs yet
    k8s.pod_logs = logs
    reply = await api.get(f"{PODS}/p/log", container="main")
    assert (reply.status, reply.body) == (200, "default/p container=main\n")


async def test_openapi_tells_kubectl_the_server_validates_fields(api: Api) -> None:
    index = (await api.get("/openapi/v3")).body["paths"]
    document = (await api.get(index["api/v1"]["serverRelativeURL"].split("?")[0])).body
    patch = document["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "ConfigMap"
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    typo = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t"}, "dta": {}}
    refused = await api.post(
        "/api/v1/namespaces/default/configmaps", typo, fieldValidation="Strict"
    )
    assert (refused.status, refused.body["message"]) == (
        400,
        'strict decoding error: unknown field "dta"',
    )


def _pb(number: int, value: bytes | str) -> bytes:
    """One length-delimited protobuf field (all this test needs)."""
    data = value.encode() if isinstance(value, str) else value
    return bytes([number << 3 | 2, len(data)]) + data


async def test_kubectl_create_configmap_sends_protobuf(api: Api) -> None:
    metadata = _pb(1, "from-kubectl") + _pb(11, _pb(1, "app") + _pb(2, "demo"))
    configmap = _pb(1, metadata) + _pb(2, _pb(1, "key") + _pb(2, "value"))
    body = b"k8s\x00" + _pb(1, _pb(1, "v1") + _pb(2, "ConfigMap")) + _pb(2, configmap)
    reply = await api.session.post(
        api.base + "/api/v1/namespaces/default/configmaps",
        data=body,
        headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
    )
    assert reply.status == 201
    stored = (await api.get("/api/v1/namespaces/default/configmaps/from-kubectl")).body
    assert (stored["data"], stored["metadata"]["labels"]) == ({"key": "value"}, {"app": "demo"})
