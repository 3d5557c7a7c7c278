"""The emulator behaves like kube-apiserver over HTTP: discovery, CRUD, lists, updates, patches,
generation and the status subresource."""

from __future__ import annotations

from typing import Any

import pytest

from emulator import Emulator
from emulator.testkit import GROUP, WIDGETS, Api, widget, widgets_path

CM_PATH = "/api/v1/namespaces/default/configmaps"


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }


# --- discovery ------------------------------------------------------------------------------


async def test_core_discovery_lists_builtin_resources(api: Api) -> None:
    assert (await api.get("/api")).body["versions"] == ["v1"]
    resources = {r["name"]: r for r in (await api.get("/api/v1")).body["resources"]}
    assert resources["namespaces"]["namespaced"] is False
    assert (
        resources["configmaps"].items()
        >= {"kind": "ConfigMap", "namespaced": True, "shortNames": ["cm"]}.items()
    )
    assert "watch" in resources["pods"]["verbs"] and "pods/status" in resources
    assert {"secrets", "serviceaccounts", "persistentvolumeclaims", "events"} <= set(resources)


async def test_group_discovery_includes_crd_versions_and_status_subresource(api: Api) -> None:
    groups = {g["name"]: g for g in (await api.get("/apis")).body["groups"]}
    assert {
        "rbac.authorization.k8s.io",
        "coordination.k8s.io",
        "apiextensions.k8s.io",
        "events.k8s.io",
        GROUP,
    } <= set(groups)
    assert groups[GROUP]["preferredVersion"]["version"] == "v1"
    assert [v["version"] for v in groups[GROUP]["versions"]] == ["v1", "v1beta1"]
    listed = {r["name"]: r for r in (await api.get(f"/apis/{GROUP}/v1")).body["resources"]}
    assert (
        listed["widgets"].items()
        >= {
            "kind": "Widget",
            "namespaced": True,
            "shortNames": ["wd"],
            "categories": ["all"],
            "singularName": "widget",
        }.items()
    )
    assert listed["widgets/status"]["verbs"] == ["get", "patch", "update"]


@pytest.mark.parametrize(
    "path",
    [
        "/apis/nope.example.com",
        "/apis/nope.example.com/v1",
        "/apis/rbac.authorization.k8s.io/v9",
        "/api/v1/nothings",
    ],
)
async def test_unknown_paths_are_404_status_objects(api: Api, path: str) -> None:
    reply = await api.get(path)
    assert reply.status == 404
    assert reply.body["kind"] == "Status" and reply.body["reason"] == "NotFound"


# --- create / get / list --------------------------------------------------------------------


async def test_create_sets_server_fields_and_get_returns_the_object(api: Api) -> None:
    created = await api.post(CM_PATH, configmap("a", x="1"))
    assert created.status == 201
    meta = created.body["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1 and meta["namespace"] == "default"
    assert int(meta["resourceVersion"]) > 0
    fetched = await api.get(f"{CM_PATH}/a")
    assert fetched.status == 200 and fetched.body == created.body


async def test_create_twice_is_409_already_exists(api: Api) -> None:
    await api.post(CM_PATH, configmap("a"))
    again = await api.post(CM_PATH, configmap("a"))
    assert again.status == 409 and again.body["reason"] == "AlreadyExists"
    assert again.body["message"] == 'configmaps "a" already exists'


async def test_generate_name_makes_unique_names(api: Api) -> None:
    body = {"metadata": {"generateName": "job-"}, "data": {}}
    names = {(await api.post(CM_PATH, body)).body["metadata"]["name"] for _ in range(5)}
    assert len(names) == 5 and all(n.startswith("job-") and len(n) == 9 for n in names)


async def test_get_missing_is_404_status_naming_the_object(api: Api) -> None:
    reply = await api.get(f"{widgets_path()}/nope")
    assert reply.status == 404
    assert reply.body["message"] == f'{WIDGETS} "nope" not found'
    assert reply.body["details"] == {"name": "nope", "group": GROUP, "kind": "widgets"}


async def test_create_in_missing_namespace_is_404(api: Api) -> None:
    reply = await api.post("/api/v1/namespaces/ghost/configmaps", configmap("a"))
    assert reply.status == 404 and reply.body["message"] == 'namespaces "ghost" not found'


async def test_resource_versions_are_global_and_increasing(api: Api) -> None:
    versions = [
        int((await api.post(CM_PATH, configmap("a"))).body["metadata"]["resourceVersion"]),
        int((await api.post(widgets_path(), widget("w"))).body["metadata"]["resourceVersion"]),
        int(
            (await api.patch(f"{CM_PATH}/a", {"data": {"k": "v"}})).body["metadata"][
                "resourceVersion"
            ]
        ),
    ]
    assert versions == sorted(versions) and len(set(versions)) == 3


async def test_list_has_kind_api_version_and_resource_version(api: Api) -> None:
    await api.post(widgets_path(), widget("w1"))
    await api.post(widgets_path("other"), widget("w2", namespace="other"))
    listed = (await api.get(widgets_path())).body
    assert listed["kind"] == "WidgetList" and listed["apiVersion"] == f"{GROUP}/v1"
    assert int(listed["metadata"]["resourceVersion"]) >= 1
    assert [i["metadata"]["name"] for i in listed["items"]] == ["w1"]
    everywhere = (await api.get(widgets_path(None))).body["items"]
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere] == [
        ("default", "w1"),
        ("other", "w2"),
    ]


async def test_namespaces_list_and_get(api: Api) -> None:
    listed = (await api.get("/api/v1/namespaces")).body
    assert listed["kind"] == "NamespaceList"
    assert {"default", "other"} <= {i["metadata"]["name"] for i in listed["items"]}
    assert (await api.get("/api/v1/namespaces/other")).body["status"]["phase"] == "Active"


async def test_other_versions_serve_the_same_objects(api: Api) -> None:
    await api.post(widgets_path(), widget("w"))
    beta = await api.get(f"/apis/{GROUP}/v1beta1/namespaces/default/widgets/w")
    assert beta.status == 200 and beta.body["apiVersion"] == f"{GROUP}/v1beta1"


LABELLED = {"a": {"app": "x", "tier": "web"}, "b": {"app": "y", "tier": "db"}, "c": {"app": "x"}}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=x", ["a", "c"]),
        ("app==x", ["a", "c"]),
        ("app!=x", ["b"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c"]),
        ("tier in (web,db)", ["a", "b"]),
        ("tier notin (web)", ["b", "c"]),
        ("app=x,tier", ["a"]),
        ("app in (x, y),!tier", ["c"]),
    ],
    ids=["eq", "double-eq", "not-eq", "exists", "not-exists", "in", "notin", "and", "in-and-not"],
)
async def test_label_selectors(api: Api, selector: str, expected: list[str]) -> None:
    for name, labels in LABELLED.items():
        await api.post(CM_PATH, configmap(name, labels))
    listed = await api.get(CM_PATH, labelSelector=selector)
    assert [i["metadata"]["name"] for i in listed.body["items"]] == expected


async def test_malformed_label_selector_is_400(api: Api) -> None:
    assert (await api.get(CM_PATH, labelSelector="a in b")).status == 400


async def test_field_selector_on_name_and_negation(api: Api) -> None:
    for name in ("a", "b"):
        await api.post(CM_PATH, configmap(name))
    assert [
        i["metadata"]["name"]
        for i in (await api.get(CM_PATH, fieldSelector="metadata.name=b")).body["items"]
    ] == ["b"]
    assert [
        i["metadata"]["name"]
        for i in (await api.get(CM_PATH, fieldSelector="metadata.name!=b")).body["items"]
    ] == ["a"]


async def test_list_pagination_with_limit_and_continue(api: Api) -> None:
    for name in "abcde":
        await api.post(CM_PATH, configmap(name))
    seen, token = [], None
    while True:
        params = {"limit": "2", **({"continue": token} if token else {})}
        page = (await api.get(CM_PATH, **params)).body
        seen += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert seen == list("abcde")


async def test_table_output_uses_printer_columns(api: Api) -> None:
    await api.post(widgets_path(), widget("w", size=3))
    reply = await api.request(
        "GET", widgets_path(), headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    )
    assert [c["name"] for c in reply.body["columnDefinitions"]] == ["Name", "Phase", "Size", "Age"]
    assert reply.body["rows"][0]["cells"][:3] == ["w", None, 3]


# --- update (PUT) ---------------------------------------------------------------------------


async def test_update_with_stale_resource_version_is_409(api: Api) -> None:
    created = (await api.post(CM_PATH, configmap("a"))).body
    await api.put(f"{CM_PATH}/a", created | {"data": {"k": "1"}})
    stale = await api.put(f"{CM_PATH}/a", created | {"data": {"k": "2"}})
    assert stale.status == 409 and stale.body["reason"] == "Conflict"
    assert (await api.get(f"{CM_PATH}/a")).body["data"] == {"k": "1"}


async def test_custom_resource_update_needs_a_resource_version(api: Api) -> None:
    created = (await api.post(widgets_path(), widget("w"))).body
    del created["metadata"]["resourceVersion"]
    reply = await api.put(widgets_path(name="w"), created)
    assert reply.status == 422
    assert reply.body["details"]["causes"][0]["field"] == "metadata.resourceVersion"


async def test_noop_update_keeps_the_resource_version(api: Api) -> None:
    created = (await api.post(CM_PATH, configmap("a", k="v"))).body
    again = (await api.put(f"{CM_PATH}/a", created)).body
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_update_cannot_change_server_owned_metadata(api: Api) -> None:
    created = (await api.post(CM_PATH, configmap("a"))).body
    forged = created | {"metadata": created["metadata"] | {"uid": "forged", "generation": 99}}
    updated = (await api.put(f"{CM_PATH}/a", forged)).body
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert updated["metadata"]["generation"] == 1


# --- patches --------------------------------------------------------------------------------


async def test_merge_patch_merges_maps_and_deletes_nulls(api: Api) -> None:
    await api.post(CM_PATH, configmap("a", keep="1", drop="2"))
    reply = await api.patch(f"{CM_PATH}/a", {"data": {"drop": None, "new": "3"}})
    assert reply.status == 200 and reply.body["data"] == {"keep": "1", "new": "3"}


async def test_strategic_merge_patch_works_for_builtins_not_custom_resources(api: Api) -> None:
    await api.post(CM_PATH, configmap("a"))
    await api.post(widgets_path(), widget("w"))
    smp = "application/strategic-merge-patch+json"
    assert (await api.patch(f"{CM_PATH}/a", {"data": {"k": "v"}}, smp)).status == 200
    # kube-apiserver has no strategic merge for custom resources: 415, as there.
    assert (await api.patch(widgets_path(name="w"), {"spec": {"size": 2}}, smp)).status == 415


@pytest.mark.parametrize(
    ("ops", "status", "data"),
    [
        ([{"op": "add", "path": "/data/b", "value": "2"}], 200, {"a": "1", "b": "2"}),
        ([{"op": "replace", "path": "/data/a", "value": "9"}], 200, {"a": "9"}),
        ([{"op": "remove", "path": "/data/a"}], 200, {}),
        (
            [
                {"op": "test", "path": "/data/a", "value": "1"},
                {"op": "add", "path": "/data/t", "value": "ok"},
            ],
            200,
            {"a": "1", "t": "ok"},
        ),
        (
            [
                {"op": "test", "path": "/data/a", "value": "nope"},
                {"op": "add", "path": "/data/t", "value": "no"},
            ],
            422,
            {"a": "1"},
        ),
        ([{"op": "remove", "path": "/data/missing"}], 422, {"a": "1"}),
        ([{"op": "copy", "from": "/data/a", "path": "/data/c"}], 200, {"a": "1", "c": "1"}),
        ([{"op": "move", "from": "/data/a", "path": "/data/m"}], 200, {"m": "1"}),
    ],
    ids=[
        "add",
        "replace",
        "remove",
        "test-ok",
        "test-fails-422",
        "missing-path-422",
        "copy",
        "move",
    ],
)
async def test_json_patch(api: Api, ops: list[Any], status: int, data: dict[str, str]) -> None:
    await api.post(CM_PATH, configmap("a", a="1"))
    reply = await api.patch(f"{CM_PATH}/a", ops, "application/json-patch+json")
    assert reply.status == status
    assert (await api.get(f"{CM_PATH}/a")).body["data"] == data


async def test_json_patch_test_on_stale_resource_version_is_422(api: Api) -> None:
    """kopf's finalizer patches depend on this to retry instead of overwriting."""
    created = (await api.post(CM_PATH, configmap("a"))).body
    await api.patch(f"{CM_PATH}/a", {"data": {"x": "1"}})
    ops = [
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": created["metadata"]["resourceVersion"],
        },
        {"op": "add", "path": "/metadata/finalizers", "value": ["x.dev/f"]},
    ]
    assert (await api.patch(f"{CM_PATH}/a", ops, "application/json-patch+json")).status == 422


async def test_merge_patch_with_stale_resource_version_is_409(api: Api) -> None:
    created = (await api.post(CM_PATH, configmap("a"))).body
    await api.patch(f"{CM_PATH}/a", {"data": {"x": "1"}})
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    assert (await api.patch(f"{CM_PATH}/a", stale)).status == 409


async def test_apply_creates_then_removes_fields_the_manager_dropped(api: Api) -> None:
    apply = "application/apply-patch+yaml"
    first = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {one: '1', two: '2'}\n"
    created = await api.patch(f"{CM_PATH}/a", first, apply, fieldManager="op")
    assert created.status == 201 and created.body["data"] == {"one": "1", "two": "2"}
    await api.patch(f"{CM_PATH}/a", {"data": {"other": "x"}})  # another writer's field stays
    second = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {one: '1'}\n"
    applied = await api.patch(f"{CM_PATH}/a", second, apply, fieldManager="op")
    assert applied.status == 200 and applied.body["data"] == {"one": "1", "other": "x"}


async def test_apply_needs_a_field_manager(api: Api) -> None:
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
    reply = await api.patch(f"{CM_PATH}/a", body, "application/apply-patch+yaml")
    assert reply.status == 422


async def test_dry_run_validates_without_storing(api: Api) -> None:
    reply = await api.post(CM_PATH, configmap("a"), dryRun="All")
    assert reply.status == 201
    assert (await api.get(f"{CM_PATH}/a")).status == 404


# --- generation and the status subresource --------------------------------------------------


async def test_generation_tracks_spec_only(api: Api) -> None:
    path = widgets_path(name="w")
    await api.post(widgets_path(), widget("w"))
    steps = [
        (path, {"metadata": {"labels": {"a": "b"}}}, 1),
        (path + "/status", {"status": {"phase": "Running"}}, 1),
        (path, {"spec": {"size": 2}}, 2),
        (path, {"spec": {"size": 2}}, 2),
        (path, {"spec": {"size": 3}}, 3),
    ]
    for url, patch, generation in steps:
        reply = await api.patch(url, patch)
        assert reply.status == 200, reply.body
        assert reply.body["metadata"]["generation"] == generation, patch


async def test_main_resource_writes_ignore_status(api: Api) -> None:
    created = await api.post(widgets_path(), widget("w") | {"status": {"phase": "Forged"}})
    assert "status" not in created.body
    reply = await api.patch(widgets_path(name="w"), {"status": {"phase": "Forged"}})
    assert "status" not in reply.body


async def test_status_writes_ignore_everything_but_status(api: Api) -> None:
    await api.post(widgets_path(), widget("w"))
    reply = await api.patch(
        widgets_path(name="w") + "/status",
        {"spec": {"size": 9}, "metadata": {"labels": {"x": "y"}}, "status": {"phase": "Running"}},
    )
    assert reply.body["spec"]["size"] == 1 and "labels" not in reply.body["metadata"]
    assert reply.body["status"] == {"phase": "Running"}


async def test_status_put_with_stale_version_is_409(api: Api) -> None:
    created = (await api.post(widgets_path(), widget("w"))).body
    await api.patch(widgets_path(name="w"), {"metadata": {"labels": {"a": "b"}}})
    reply = await api.put(widgets_path(name="w") + "/status", created | {"status": {"phase": "X"}})
    assert reply.status == 409


async def test_in_process_helpers_share_the_store(k8s: Emulator, api: Api) -> None:
    """Tests act as KubeRay through these; the operator sees the same objects over HTTP."""
    k8s.create(WIDGETS, widget("w"))
    k8s.patch_status(WIDGETS, "w", {"phase": "Running"}, "default")
    assert (await api.get(widgets_path(name="w"))).body["status"] == {"phase": "Running"}
    assert k8s.requests.count() == 1  # only the HTTP GET above is counted
