"""A new job's first status waits for KubeRay's first word on its RayJob, for a bounded time
(`controllers.first_status`), and the timer of that wait goes once it is no longer needed."""

from __future__ import annotations

import asyncio

from rlhf_operator.controllers.first_status import FirstStatus, kuberay_reported
from rlhf_operator.controllers.timers import Requeue
from rlhf_operator.reconcile.observed import RayJobObservation

KEY = ("team-a", "job")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_status_waits_for_kuberay_then_at_most_the_grace() -> None:
    clock = Clock()
    first = FirstStatus(5.0, clock)
    assert not first.awaiting(KEY)
    # The pass that made the RayJob (not in the watch cache yet): wait the whole grace.
    assert first.waits(KEY, ray_job_seen=False, reported=False) == 5.0
    assert first.awaiting(KEY)
    clock.now += 2.0  # its RayJob seen, KubeRay silent: what is left of the same wait
    assert first.waits(KEY, ray_job_seen=True, reported=False) == 3.0
    clock.now += 1.0  # KubeRay's word: write now
    assert first.waits(KEY, ray_job_seen=True, reported=True) is None
    assert first.written(KEY) == 105.0
    assert first.written(KEY) is None
    assert not first.awaiting(KEY)


def test_where_kuberay_stays_silent_the_status_is_written_after_the_grace() -> None:
    clock = Clock()
    first = FirstStatus(5.0, clock)
    first.waits(KEY, ray_job_seen=True, reported=False)
    clock.now += 5.0
    assert not first.awaiting(KEY)
    assert first.waits(KEY, ray_job_seen=True, reported=False) is None
    first.forget(KEY)
    assert first.written(KEY) is None


def test_what_counts_as_kuberays_word() -> None:
    new = RayJobObservation(name="job-r0", attempt=0)
    initializing = RayJobObservation(name="job-r0", attempt=0, deployment_status="Initializing")
    assert not kuberay_reported([new])
    assert kuberay_reported([new, initializing])
    # What the RayJob handler reads of a watch event's body.
    for body, said in [
        ({"metadata": {}, "status": {}}, False),
        ({"metadata": {}}, False),
        ({"metadata": {}, "status": {"jobDeploymentStatus": "Suspended"}}, True),
    ]:
        assert kuberay_reported([RayJobObservation.from_object(body)]) is said


async def test_cancel_due_cancels_only_the_timer_asked_for_then() -> None:
    runs: list[object] = []

    async def run(key: object) -> None:
        runs.append(key)

    timers = Requeue(run)
    loop = asyncio.get_running_loop()
    due = loop.time() + 0.2
    timers.schedule(KEY, 0.2)
    timers.cancel_due(KEY, due + 10)  # another time: not that timer
    timers.cancel_due(KEY, due)
    timers.schedule(("team-a", "other"), 0.2)
    timers.schedule(("team-a", "other"), 0.05)  # asked for since, sooner: stays
    timers.cancel_due(("team-a", "other"), due)
    await asyncio.sleep(0.3)
    assert runs == [("team-a", "other")]
    await timers.close()
