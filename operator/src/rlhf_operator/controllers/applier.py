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
Child = tuple[str, str]  # (kind, name), in the job's namespace


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
        # Per job: the digest each child was last applied with, and the refusals. By job, not
        # by child name: what a job's pass reads and a deleted job drops is its own entries
        # (job `a`'s children are not told from job `a-b`'s by their names' prefix).
        self._applied: dict[Key, dict[Child, str]] = {}
        self._refused: dict[Key, dict[Child, Refusal]] = {}
        self._backoff = Backoff(settings)  # keyed by (job, kind, name)

    def applied(self, key: Key, child: Desired) -> bool:
        """This very content of the child was applied (and it was not deleted since)."""
        return self._applied.get(key, {}).get((child.kind, child.name)) == child.digest

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
        name = (child.kind, child.name)
        digest = child.digest
        applied_before = self._applied.get(key, {})
        if applied_before.get(name) == digest:
            return _Step()  # applied before with this content (a deleted RayJob is forgotten)
        refused = self._refused.get(key, {}).get(name)
        if refused is not None and refused.digest == digest and time.monotonic() < refused.retry_at:
            return _Step(failure=refused.failure if refused.reported else None, blocks=True)
        try:
            applied = await apply(
                self.api, child, known_ours=name in applied_before, probably_new=probably_new
            )
        except ApiError as err:
            refused = self._refuse(key, name, digest, err)
            self.metrics.children.labels(child.kind, "refused").inc()
            return _Step(failure=refused.failure if refused.reported else None, blocks=True)
        self._drop_refusal(key, name)
        self.metrics.children.labels(child.kind, applied.outcome.value).inc()
        if applied.outcome is Outcome.CONFLICT:
            self.forget_child(key, *name)
            return _Step(applied, blocks=True)
        self._applied.setdefault(key, {})[name] = digest
        return _Step(applied)

    def _refuse(self, key: Key, name: Child, digest: str, err: ApiError) -> Refusal:
        failures, delay = self._backoff.failed((*key, *name))
        logger.warning(
            "%s/%s %s refused (%d in a row, next try in %.0f s): %s",
            key[0],
            *name,
            failures,
            delay,
            err,
        )
        failure = ApplyFailure(*name, err.status, err.reason, err.message)
        refusal = Refusal(digest, time.monotonic() + delay, failure)
        self._refused.setdefault(key, {})[name] = refusal
        return refusal

    def _drop_refusal(self, key: Key, name: Child) -> None:
        refused = self._refused.get(key)
        if refused is not None and refused.pop(name, None) is not None:
            self._backoff.succeeded((*key, *name))
            if not refused:
                del self._refused[key]

    def refusals(self, key: Key) -> list[Refusal]:
        return list(self._refused.get(key, {}).values())

    def reported_failures(self, key: Key) -> tuple[ApplyFailure, ...]:
        return tuple(r.failure for r in self.refusals(key) if r.reported)

    def keep_only(self, key: Key, desired: Iterable[Desired]) -> None:
        """Refusals of children no longer desired (a finished job's RayJob) are no news."""
        keep = {(d.kind, d.name) for d in desired}
        for name in [c for c in self._refused.get(key, {}) if c not in keep]:
            self._drop_refusal(key, name)

    def forget_child(self, key: Key, kind: str, name: str) -> None:
        """A child of the job went away (deleted by us or someone): apply it again when still
        desired."""
        applied = self._applied.get(key)
        if applied is not None:
            applied.pop((kind, name), None)
            if not applied:
                del self._applied[key]

    def forget(self, key: Key) -> None:
        for name in list(self._refused.get(key, {})):
            self._drop_refusal(key, name)
        self._applied.pop(key, None)
