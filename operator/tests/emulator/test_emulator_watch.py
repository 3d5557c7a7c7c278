"""Watches: replay from a resourceVersion, no lost events, selectors, timeouts, bookmarks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from emulator import Emulator
from emulator.testkit import WIDGETS, Api, widget, widgets_path


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


async def test_watch_from_list_version_replays_only_later_events(api: Api) -> None:
    await api.post(widgets_path(), widget("before"))
    listed = (await api.get(widgets_path())).body
    await api.post(widgets_path(), widget("after"))
    await api.patch(widgets_path(name="before"), {"spec": {"size": 2}})
    await api.delete(widgets_path(name="after"))
    events = await api.watch(
        widgets_path(), count=3, resourceVersion=listed["metadata"]["resourceVersion"]
    )
    assert summary(events) == [("ADDED", "after"), ("MODIFIED", "before"), ("DELETED", "after")]
    assert events[1]["object"]["spec"]["size"] == 2  # full objects, not diffs


async def test_watch_without_version_starts_with_existing_objects(api: Api) -> None:
    for name in ("a", "b"):
        await api.post(widgets_path(), widget(name))
    events = await api.watch(widgets_path(), count=2)
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b")]


async def test_no_event_is_lost_between_list_and_watch(k8s: Emulator, api: Api) -> None:
    """Writes racing the watch's start still arrive, in order, exactly once."""
    listed = (await api.get(widgets_path())).body
    rv = listed["metadata"]["resourceVersion"]

    async def writer() -> None:
        for i in range(30):
            k8s.create(WIDGETS, widget(f"w{i:02d}"))
            await asyncio.sleep(0)

    watching = asyncio.create_task(api.watch(widgets_path(), count=30, resourceVersion=rv))
    await writer()
    events = await watching
    assert summary(events) == [("ADDED", f"w{i:02d}") for i in range(30)]


async def test_live_events_stream_after_the_replay(k8s: Emulator, api: Api) -> None:
    async def later() -> None:
        await asyncio.sleep(0.1)
        k8s.create(WIDGETS, widget("live"))

    task = asyncio.create_task(later())
    events = await api.watch(widgets_path(), count=1, resourceVersion=str(k8s.store.rv))
    await task
    assert summary(events) == [("ADDED", "live")]


@pytest.mark.parametrize("flag", ["true", "1"])
async def test_watch_flag_spellings(api: Api, flag: str) -> None:
    await api.post(widgets_path(), widget("a"))
    async with api.session.get(
        api.base + widgets_path(), params={"watch": flag, "timeoutSeconds": "1"}
    ) as response:
        first = await response.content.readline()
    assert b'"ADDED"' in first


async def test_namespaced_and_cluster_wide_watches(api: Api) -> None:
    await api.post(widgets_path(), widget("here"))
    await api.post(widgets_path("other"), widget("there", namespace="other"))
    assert summary(await api.watch(widgets_path("other"), count=1)) == [("ADDED", "there")]
    assert summary(await api.watch(widgets_path(None), count=2)) == [
        ("ADDED", "here"),
        ("ADDED", "there"),
    ]


async def test_label_selector_watch_sees_objects_enter_and_leave(api: Api) -> None:
    start = (await api.get(widgets_path())).body["metadata"]["resourceVersion"]
    await api.post(widgets_path(), widget("w"))
    path = widgets_path(name="w")
    await api.patch(path, {"metadata": {"labels": {"team": "a"}}})
    await api.patch(path, {"spec": {"size": 2}})
    await api.patch(path, {"metadata": {"labels": {"team": None}}})
    events = await api.watch(widgets_path(), count=3, resourceVersion=start, labelSelector="team=a")
    assert summary(events) == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


async def test_timeout_ends_the_stream_with_a_bookmark(k8s: Emulator, api: Api) -> None:
    events = await api.watch(
        widgets_path(),
        count=10,
        timeout=5,
        timeoutSeconds="1",
        allowWatchBookmarks="true",
        resourceVersion=str(k8s.store.rv),
    )
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert events[0]["object"]["metadata"]["resourceVersion"] == str(k8s.store.rv)


async def test_a_quiet_watch_gets_periodic_bookmarks(
    k8s: Emulator, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As kube-apiserver sends them (every minute), so that a client's inactivity timeout
    does not take a quiet stream for dead; the stream stays open after each."""
    monkeypatch.setattr(k8s._server, "bookmark_seconds", 0.2)
    events = await api.watch(
        widgets_path(),
        count=3,
        timeout=5,
        timeoutSeconds="10",
        allowWatchBookmarks="true",
        resourceVersion=str(k8s.store.rv),
    )
    assert [e["type"] for e in events] == ["BOOKMARK"] * 3
    # Not asked for: none, however long the watch stays quiet.
    quiet = await api.watch(
        widgets_path(), count=3, timeout=5, timeoutSeconds="1", resourceVersion=str(k8s.store.rv)
    )
    assert quiet == []


async def test_initial_events_end_with_a_bookmark(api: Api) -> None:
    await api.post(widgets_path(), widget("a"))
    events = await api.watch(
        widgets_path(),
        count=2,
        sendInitialEvents="true",
        allowWatchBookmarks="true",
        resourceVersionMatch="NotOlderThan",
    )
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    annotations = events[1]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}


async def test_watches_closed_by_the_client_are_unregistered(k8s: Emulator, api: Api) -> None:
    response = await api.session.get(api.base + widgets_path(), params={"watch": "true"})
    await asyncio.sleep(0.05)
    assert len(k8s.store.watchers_of(k8s.registry.resolve(WIDGETS))) == 1
    response.close()
    await k8s.wait_for(
        lambda: not k8s.store.watchers_of(k8s.registry.resolve(WIDGETS)),
        timeout=2,
        what="the watcher's removal",
    )
