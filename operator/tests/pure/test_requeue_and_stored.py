"""The job controller's queue of passes (`controllers.timers.Requeue`) and the watch cache's
packed RLHFJobs (`controllers.stored.StoredJob`): what a burst of thousands of jobs leans on."""

from __future__ import annotations

import asyncio
import contextvars
import json
from typing import Any

from rlhf_operator.controllers.stored import StoredJob
from rlhf_operator.controllers.timers import Requeue

from .factories import job_body

# kopf keeps the handler's cause (the object's body, the raw watch event) in a context
# variable of this name; a stand-in with the same name shows what a timer keeps of it.
cause_var: contextvars.ContextVar[Any] = contextvars.ContextVar("cause_var")
other_var: contextvars.ContextVar[str] = contextvars.ContextVar("other_var")


class Runs:
    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.keys: list[Any] = []
        self.causes: list[Any] = []
        self.others: list[str | None] = []
        self.gate = gate

    async def __call__(self, key: Any) -> None:
        self.keys.append(key)
        self.causes.append(cause_var.get(None))
        self.others.append(other_var.get(None))
        if self.gate is not None:
            await self.gate.wait()


async def test_a_later_request_never_postpones_a_sooner_timer() -> None:
    runs = Runs()
    requeue = Requeue(runs)
    requeue.schedule("a", 0.05)
    requeue.schedule("a", 3600.0)  # a pass that wants a look in an hour
    await asyncio.sleep(0.2)
    assert runs.keys == ["a"]
    requeue.schedule("b", 3600.0)
    requeue.schedule("b", 0.0)  # sooner: replaces it
    await asyncio.sleep(0.05)
    assert runs.keys == ["a", "b"]
    await requeue.close()


async def test_events_before_a_queued_pass_starts_share_it() -> None:
    gate = asyncio.Event()
    runs = Runs(gate)
    requeue = Requeue(runs, coalesce=True)
    requeue.schedule("a", 0.0)
    await asyncio.sleep(0.01)  # its pass runs, not started (the owner has not said so)
    for _ in range(5):
        requeue.schedule("a", 0.0)
        await asyncio.sleep(0.01)
    assert runs.keys == ["a"]
    requeue.started("a")  # it read what it acts on: a new event needs a pass of its own
    requeue.schedule("a", 0.0)
    await asyncio.sleep(0.01)
    assert runs.keys == ["a", "a"]
    gate.set()
    await asyncio.sleep(0.01)
    requeue.schedule("a", 0.0)  # both ended: the mark is gone with them
    await asyncio.sleep(0.01)
    assert runs.keys == ["a", "a", "a"]
    await requeue.close()


async def test_a_timer_keeps_no_handler_cause() -> None:
    runs = Runs()
    requeue = Requeue(runs)
    cause_var.set({"object": {"spec": "a whole RayJob"}})
    other_var.set("the event queue")
    requeue.schedule("a", 0.0)
    await asyncio.sleep(0.05)
    assert runs.causes == [None]
    assert runs.others == ["the event queue"]  # what a pass needs of the context stays
    await requeue.close()


def test_a_stored_job_reads_as_the_body_without_bookkeeping() -> None:
    body = job_body(status={"phase": "Running", "conditions": [{"type": "Running"}]})
    body["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    body["metadata"]["annotations"] = {
        "rlhf.dev/last-handled-configuration": "{...}",
        "team": "nlp",
    }
    stored = StoredJob(body)
    expected = json.loads(json.dumps(body))
    del expected["metadata"]["managedFields"]
    expected["metadata"]["annotations"] = {"team": "nlp"}
    assert dict(stored) == expected
    assert stored.get("status", {})["phase"] == "Running"
    assert "spec" in stored and "managedFields" not in stored["metadata"]
    # Each read is a fresh copy: a caller that changes it changes nothing stored.
    stored["spec"]["algorithm"] = "changed"
    assert stored["spec"] == expected["spec"]
    assert len(stored) == len(expected) and set(stored) == set(expected)


def test_a_stored_job_without_status() -> None:
    body = job_body()
    body.pop("status", None)
    stored = StoredJob(body)
    assert stored.get("status") is None and "status" not in stored
    assert stored["spec"] == body["spec"]


def test_stored_jobs_compare_packed(monkeypatch: Any) -> None:
    """kopf's index compares each event's entry with the one it replaces: by the packed bytes,
    without decoding spec and status; a plain mapping still compares by content."""
    running = job_body(status={"phase": "Running"})
    same, other = StoredJob(running), StoredJob(job_body(status={"phase": "Failed"}))
    unpacked: list[bytes] = []
    monkeypatch.setattr(
        "rlhf_operator.controllers.stored._unpack", lambda packed: unpacked.append(packed)
    )
    assert StoredJob(running) == same and StoredJob(running) != other
    assert unpacked == []
    monkeypatch.undo()
    assert same == json.loads(json.dumps(running)) and other != json.loads(json.dumps(running))
