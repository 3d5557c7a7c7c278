"""When a new job's first status is written: once KubeRay has said something of its RayJob.

A new job's pass creates its children, the RayJob last; the RayJob's first watch event (no
status yet) and KubeRay's first status of it (Initializing, or Suspended in a Kueue queue) come
a moment apart. A status written between them says only "the RayJob exists, KubeRay has not
looked at it", and is out of date within a second: a status patch, and a pass, per job that
nobody reads (at 5,000 jobs created at once, 1 request in 13). So the first status waits for
KubeRay's word, at most `first_status_grace_seconds` after the RayJob was made: where KubeRay
is slow or down, the job then says so. The wait is kept in memory only: an operator restarted
meanwhile writes the status at its first pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..reconcile.observed import DeploymentStatus, RayJobObservation

Key = tuple[str, str]


def kuberay_reported(ray_jobs: Sequence[RayJobObservation]) -> bool:
    """KubeRay has written a status on one of the job's RayJobs."""
    return any(o.deployment_status != DeploymentStatus.NEW for o in ray_jobs)


class FirstStatus:
    """Per new job whose RayJob is made and whose status is not written yet: until when its
    status waits for KubeRay (a monotonic time)."""

    def __init__(self, grace: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self._clock = clock
        self._until: dict[Key, float] = {}

    def waits(self, key: Key, ray_job_seen: bool, reported: bool) -> float | None:
        """Seconds the job's first status still waits (the pass writes none and looks again
        then), or None: write it now. The wait starts at the first pass that made (or found)
        the RayJob without a status on the job."""
        if reported and ray_job_seen:
            return None
        until = self._until.setdefault(key, self._clock() + self.grace)
        left = until - self._clock()
        return left if left > 0 else None

    def awaiting(self, key: Key) -> bool:
        """The job's first status waits for KubeRay: an event of its RayJob that brings no
        status of KubeRay's needs no pass (the wait's own timer, or KubeRay's word, brings
        it)."""
        until = self._until.get(key)
        return until is not None and until > self._clock()

    def written(self, key: Key) -> float | None:
        """The job has a status now: its wait (the monotonic time it was due), if it had one."""
        return self._until.pop(key, None)

    def forget(self, key: Key) -> None:
        self._until.pop(key, None)
