"""Applying a job's children, with memory: what was applied (so unchanged children cost no
request) and what the API server refused (so a refused child is not asked for again before its
backoff ends: the operator's one retry policy, `timers.Backoff`, per child).

A refusal is not an exception to the pass: it is returned as an `ApplyFailure`, which the pass
observes like anything else, so it shows on status (ChildrenApplied=False) and in an Event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..kube.apply import Applied, Outcome, apply
from ..kube.client import ApiError, KubeApi
from ..reconcile.desired import Desired
from ..reconcile.observed import ApplyFailure
from ..settings import OperatorSettings
from .metrics import Metrics
from .timers import Backoff

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, job name)
ChildKey = tuple[str, str, str]  # (namespace, kind, name)


def of_job(child: ChildKey, key: Key) -> bool:
    """The child belongs to the job: children are named `<job>-<suffix>`."""
    return child[0] == key[0] and child[2].startswith(f"{key[1]}-")


@dataclass(frozen=True)
class _Step:
    """What applying one child did: its outcome (none when nothing was sent), a refusal worth
    reporting, and whether the RayJob must wait for it."""

    applied: Applied | None = None
    failure: ApplyFailure | None = None
    blocks: bool = False


@dataclass(frozen=True)
class Refusal:
    """The API server's last refusal of one child, and when it may be asked again."""

    digest: str
    retry_at: float  # time.monotonic()
    failure: ApplyFailure

    @property
    def reported(self) -> bool:
        # A stale resourceVersion and throttling pass by themselves: retried with the same
        # backoff, but not worth a condition and an Event.
        return self.failure.code not in {409, 429}


class Applier:
    def __init__(self, api: KubeApi, settings: OperatorSettings, metrics: Metrics) -> None:
        self.api, self.settings, self.metrics = api, settings, metrics
        self._applied: dict[ChildKey, str] = {}
        self._refused: dict[ChildKey, Refusal] = {}
        self._backoff = Backoff(settings)

    def applied(self, key: Key, child: Desired) -> bool:
        """This very content of the child was applied (and it was not deleted since)."""
        return self._applied.get((key[0], child.kind, child.name)) == child.digest

    def would_send(self, key: Key, desired: Iterable[Desired]) -> bool:
        """Some child differs from what was last applied (or was never applied)."""
        return not all(self.applied(key, child) for child in desired)

    async def apply_all(
        self, key: Key, desired: Iterable[Desired], *, probably_new: bool
    ) -> tuple[list[Applied], tuple[ApplyFailure, ...]]:
        """Apply what changed; returns what was done and the refusals worth reporting (one
        still in its backoff counts again, without a request). The children the pods need
        go at once, side by side (none depends on another); the RayJob after them, and not
        while one of them is refused or someone else's."""
        children = list(desired)
        support = [c for c in children if c.kind != "RayJob"]
        steps = await asyncio.gather(*(self._apply_one(key, c, probably_new) for c in support))
        blocked = any(step.blocks for step in steps)
        for child in children:
            if child.kind == "RayJob" and not blocked:
                steps.append(await self._apply_one(key, child, probably_new))
        outcomes = [step.applied for step in steps if step.applied is not None]
        failures = tuple(step.failure for step in steps if step.failure is not None)
        return outcomes, failures

    async def _apply_one(self, key: Key, child: Desired, probably_new: bool) -> _Step:
        child_key = (key[0], child.kind, child.name)
        digest = child.digest
        if self._applied.get(child_key) == digest:
            return _Step()  # applied before with this content (a deleted RayJob is forgotten)
        refused = self._refused.get(child_key)
        if refused is not None and refused.digest == digest and time.monotonic() < refused.retry_at:
            return _Step(failure=refused.failure if refused.reported else None, blocks=True)
        try:
            applied = await apply(
                self.api, child, known_ours=child_key in self._applied, probably_new=probably_new
            )
        except ApiError as err:
            refused = self._refuse(child_key, digest, child, err)
            self.metrics.children.labels(child.kind, "refused").inc()
            return _Step(failure=refused.failure if refused.reported else None, blocks=True)
        self._refused.pop(child_key, None)
        self._backoff.succeeded(child_key)
        self.metrics.children.labels(child.kind, applied.outcome.value).inc()
        if applied.outcome is Outcome.CONFLICT:
            self._applied.pop(child_key, None)
            return _Step(applied, blocks=True)
        self._applied[child_key] = digest
        return _Step(applied)

    def _refuse(self, child_key: ChildKey, digest: str, child: Desired, err: ApiError) -> Refusal:
        failures, delay = self._backoff.failed(child_key)
        logger.warning(
            "%s/%s %s refused (%d in a row, next try in %.0f s): %s",
            child_key[0],
            child.kind,
            child.name,
            failures,
            delay,
            err,
        )
        failure = ApplyFailure(child.kind, child.name, err.status, err.reason, err.message)
        refusal = Refusal(digest, time.monotonic() + delay, failure)
        self._refused[child_key] = refusal
        return refusal

    def refusals(self, key: Key) -> list[Refusal]:
        return [r for child, r in self._refused.items() if of_job(child, key)]

    def reported_failures(self, key: Key) -> tuple[ApplyFailure, ...]:
        return tuple(r.failure for r in self.refusals(key) if r.reported)

    def keep_only(self, key: Key, desired: Iterable[Desired]) -> None:
        """Refusals of children no longer desired (a finished job's RayJob) are no news."""
        keep = {(key[0], d.kind, d.name) for d in desired}
        for child in [c for c in self._refused if of_job(c, key) and c not in keep]:
            del self._refused[child]
            self._backoff.succeeded(child)

    def forget_child(self, namespace: str, kind: str, name: str) -> None:
        """A child went away (deleted by us or someone): apply it again when still desired."""
        self._applied.pop((namespace, kind, name), None)

    def forget(self, key: Key) -> None:
        for cache in (self._applied, self._refused):
            for child in [c for c in cache if of_job(c, key)]:
                del cache[child]
        self._backoff.forget(lambda child: of_job(child, key))
