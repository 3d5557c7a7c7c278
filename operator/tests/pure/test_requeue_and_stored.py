"""The job controller's queue of passes (`controllers.timers.Requeue`) and the watch cache's
packed RLHFJobs (`controllers.stored.StoredJob`): what a burst of thousands of jobs leans on."""

from __future__ import annotations

import asyncio
import contextvars
import json
from typing import Any

from rlhf_operator.api.v1alpha1 import RLHFJobStatus
from rlhf_operator.controllers.jobs import Controller
from rlhf_operator.controllers.metrics import Metrics
from rlhf_operator.controllers.stored import StoredJob
from rlhf_operator.controllers.timers import PassSlots, Requeue
from rlhf_operator.reconcile.decide import Decision
from rlhf_operator.settings import OperatorSettings

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


class _PatchingApi:
    """The status patch's answer: the job at resourceVersion 12."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer

    async def patch_status(self, body: Any, patch: Any) -> dict[str, Any]:
        return self.answer


async def test_a_status_answer_older_than_the_watch_is_not_kept() -> None:
    """The answer to a status patch is kept until its watch event comes; when the event came
    first (a busy operator reads answers late), nothing would ever drop it: not kept."""
    before = job_body(status={"phase": "Pending"})
    before["metadata"]["resourceVersion"] = "11"
    answer = json.loads(json.dumps(before))
    answer["metadata"]["resourceVersion"] = "12"
    answer["status"] = {"phase": "Running"}
    key = (before["metadata"]["namespace"], before["metadata"]["name"])
    decision = Decision(status=RLHFJobStatus.model_validate({"phase": "Running"}))

    for seen, kept in (("11", True), ("12", False)):
        api: Any = _PatchingApi(answer)
        controller = Controller(OperatorSettings(), api, Metrics())
        indexed = json.loads(json.dumps(answer if seen == "12" else before))
        controller.bind({key: [StoredJob(indexed)]}, {}, {}, {})
        await controller._write_status(key, before, decision)
        assert (key in controller._latest) is kept


async def test_pass_slots_let_a_new_jobs_pass_go_first() -> None:
    slots = PassSlots(1)
    order: list[str] = []
    gate = asyncio.Event()

    async def work(name: str, urgent: bool) -> None:
        async with slots.slot(urgent=urgent):
            order.append(name)
            if name == "first":
                await gate.wait()

    first = asyncio.create_task(work("first", False))
    await asyncio.sleep(0)
    waiting = [
        asyncio.create_task(work(name, urgent))
        for name, urgent in [("status-1", False), ("new-1", True), ("status-2", False)]
    ]
    cancelled = asyncio.create_task(work("new-cancelled", True))
    await asyncio.sleep(0)
    waiting.append(asyncio.create_task(work("new-2", True)))
    await asyncio.sleep(0)
    cancelled.cancel()
    gate.set()
    await asyncio.gather(first, *waiting)
    assert order == ["first", "new-1", "new-2", "status-1", "status-2"]
    # Every slot came back: one free, none owed.
    async with slots.slot(urgent=False):
        order.append("after")
    assert order[-1] == "after"


async def test_pass_slots_let_a_status_pass_wait_for_no_more_than_give_way_new_ones() -> None:
    slots = PassSlots(1, give_way=2)
    order: list[str] = []
    gate = asyncio.Event()

    async def work(name: str, urgent: bool) -> None:
        async with slots.slot(urgent=urgent):
            order.append(name)
            if name == "first":
                await gate.wait()

    first = asyncio.create_task(work("first", True))
    await asyncio.sleep(0)
    queued = [("status-1", False), ("new-1", True), ("new-2", True), ("status-2", False)]
    queued += [("new-3", True), ("new-4", True), ("new-5", True)]
    waiting = [asyncio.create_task(work(name, urgent)) for name, urgent in queued]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *waiting)
    # status-1 queued before any urgent pass was let go: it waits for two (new-1, new-2);
    # status-2 queued then too, and goes as soon as it is its turn among the others.
    assert order == ["first", "new-1", "new-2", "status-1", "status-2", "new-3", "new-4", "new-5"]


async def test_pass_slots_say_when_the_last_pass_ends_with_none_waiting() -> None:
    idle: list[bool] = []
    slots = PassSlots(2, on_idle=lambda: idle.append(slots.idle))
    assert slots.idle
    gate = asyncio.Event()

    async def work() -> None:
        async with slots.slot(urgent=False):
            await gate.wait()

    tasks = [asyncio.create_task(work()) for _ in range(3)]  # the third waits for a slot
    await asyncio.sleep(0)
    assert not slots.idle
    gate.set()
    await asyncio.gather(*tasks)
    # Told once: the first pass's slot went to the waiting one, the second's was not the last.
    assert idle == [True] and slots.idle
