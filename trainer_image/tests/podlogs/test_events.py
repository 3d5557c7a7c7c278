"""The job's Events kept in the attempt's events.jsonl: which Events are the job's, each kept
once per count, and the list-then-watch loop (relist after a watch error, back-off after an API
error, stop when asked) over a scripted API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlhf_trainer.config.podlogs import ContainerLogsConfig
from rlhf_trainer.podlogs.events import EventsFile, is_the_jobs, kept, record_events


def event(kind: str, name: str, uid: str = "u1", count: int = 1, **more: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{name}.abc", "uid": uid, "resourceVersion": "9"},
        "involvedObject": {"kind": kind, "name": name},
        "type": "Normal",
        "reason": "Started",
        "message": "started",
        "count": count,
        **more,
    }


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        ("RLHFJob", "tiny", True),
        ("RLHFJob", "tiny-2", False),  # another job
        ("RayJob", "tiny-r1", True),
        ("RayCluster", "tiny-r1-raycluster-x7k2p", True),
        ("Pod", "tiny-r1-raycluster-x7k2p-head-4xz9q", True),
        ("Job", "tiny-r1", True),  # the submitter's
        ("Pod", "tiny-r0-raycluster-abcde-head-q1w2e", False),  # the attempt before
        ("Pod", "tiny-r10-raycluster-abcde-head-q1w2e", False),  # attempt 10, not 1
        ("Pod", "other-r1-head", False),
    ],
)
def test_which_events_are_the_jobs(kind: str, name: str, expected: bool) -> None:
    assert is_the_jobs(event(kind, name), "tiny", 1) is expected


def test_an_event_is_kept_once_per_count_with_its_fields(tmp_path: Path) -> None:
    file = EventsFile(tmp_path / "events.jsonl", ContainerLogsConfig())
    assert file.add(event("Pod", "tiny-r0-x", lastTimestamp="2026-12-02T01:00:00Z"))
    assert not file.add(event("Pod", "tiny-r0-x"))  # the same again (a relist)
    assert file.add(event("Pod", "tiny-r0-x", count=2))  # it happened again
    file.close()
    records = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [r["count"] for r in records] == [1, 2]
    assert records[0] == kept(event("Pod", "tiny-r0-x", lastTimestamp="2026-12-02T01:00:00Z"))
    assert "resourceVersion" not in records[0]


class ScriptedApi:
    """Answers list() and watch() from a script; records what was asked."""

    def __init__(self, lists: list[Any], watches: list[list[tuple[str, dict[str, Any]]]]):
        self.lists, self.watches = lists, watches
        self.asked: list[str] = []

    def list(self) -> tuple[list[dict[str, Any]], str]:
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            self.asked.append("list failed")
            raise answer
        self.asked.append("list")
        return answer, "10"

    def watch(self, resource_version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        self.asked.append(f"watch from {resource_version}")
        yield from self.watches.pop(0) if self.watches else []


def test_list_then_watch_relisting_after_errors_until_stopped(tmp_path: Path) -> None:
    stop = threading.Event()
    first = event("Pod", "tiny-r0-w", uid="a")
    later = event("RLHFJob", "tiny", uid="b", reason="Retrying")
    foreign = event("Pod", "else-r0-w", uid="c")
    api = ScriptedApi(
        lists=[[first, foreign], OSError("connection refused"), [first, later]],
        watches=[
            [("ADDED", later), ("BOOKMARK", {}), ("ERROR", {"code": 410})],
            [("MODIFIED", {**first, "count": 2}), ("ADDED", foreign)],
        ],
    )
    original_watch = api.watch

    def watch_then_stop(version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from original_watch(version)
        if not api.watches:
            stop.set()

    api.watch = watch_then_stop  # type: ignore[method-assign]
    file = EventsFile(tmp_path / "events.jsonl", ContainerLogsConfig())
    done = threading.Thread(target=record_events, args=(api, file, "tiny", 0, stop))
    done.start()
    done.join(timeout=30)
    assert not done.is_alive()
    file.close()
    assert api.asked == ["list", "watch from 10", "list failed", "list", "watch from 10"]
    records = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(r["uid"], r["count"]) for r in records] == [("a", 1), ("b", 1), ("a", 2)]
