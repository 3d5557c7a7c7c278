"""Carries out reconcile decisions: the operator's imperative shell around `reconcile.decide`.

Every trigger (an RLHFJob created, edited or resumed, any event on it, an event on one of its
RayJobs, a timer for deadlines/TTL/retries) runs the same level-based pass for that job, one at
a time per job. API requests happen only for what changed: children already applied with the
same content (remembered in memory) are not sent again, RayJobs are read from the watch cache
(a kopf index), and the status is patched only when it differs. An idle job costs nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import kopf
from pydantic import ValidationError

from rlhf_trainer.config import JobSpec

from .events import Event, EventReason, EventType
from .kube import ApiError, Applied, KubeApi, Outcome, apply, desired_hash
from .metrics import Metrics
from .observed import Observed
from .reconcile import Decision, Desired, decide, status_patch
from .settings import OperatorSettings

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
JSON = dict[str, Any]


@dataclass(frozen=True)
class Blockers:
    """What kept the job's RayJob from being created, as of one spec generation."""

    generation: int | None
    missing: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    checked_at: float = 0.0


def _key(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _resource_version(body: Mapping[str, Any] | None) -> int:
    try:
        return int(((body or {}).get("metadata") or {}).get("resourceVersion", -1))
    except (TypeError, ValueError):
        return -1


def dependencies(body: Mapping[str, Any]) -> list[tuple[JSON, str]]:
    """Objects the spec references that the pods cannot start without: (object ref, label)."""
    try:
        spec = JobSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return []
    namespace = _key(body)[0]

    def ref(kind: str, name: str) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
        }

    found: list[tuple[JSON, str]] = []
    reward = spec.models.reward_function
    if reward is not None and reward.config_map_ref is not None:
        name = reward.config_map_ref.name
        found.append((ref("ConfigMap", name), f"ConfigMap {name} (spec.models.rewardFunction)"))
    storage = spec.checkpoint.storage
    if storage is not None and storage.claim_name is not None:
        name = storage.claim_name
        label = f"PersistentVolumeClaim {name} (spec.checkpoint.storage.claimName)"
        found.append((ref("PersistentVolumeClaim", name), label))
    return found


class Controller:
    def __init__(
        self,
        settings: OperatorSettings,
        api: KubeApi,
        metrics: Metrics,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.api = api
        self.metrics = metrics
        self.clock = clock
        self.jobs: Mapping[Any, Any] = {}  # kopf index: (ns, name) -> [RLHFJob body]
        self.ray_jobs: Mapping[Any, Any] = {}  # kopf index: (ns, job) -> [RayJob bodies]
        self._locks: defaultdict[Key, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._applied: dict[tuple[str, str, str], str] = {}
        # Children the API server rejected: (content hash, retry after, the error).
        self._rejected: dict[tuple[str, str, str], tuple[str, float, ApiError]] = {}
        self._blockers: dict[Key, Blockers] = {}
        self._latest: dict[Key, JSON] = {}
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def bind(self, jobs: Mapping[Any, Any], ray_jobs: Mapping[Any, Any]) -> None:
        self.jobs, self.ray_jobs = jobs, ray_jobs

    def job_bodies(self) -> Iterator[Mapping[str, Any]]:
        for store in list(self.jobs.values()):
            yield from list(store)

    def job_body(self, key: Key) -> Mapping[str, Any] | None:
        store = self.jobs.get(key)
        return next(iter(store), None) if store is not None else None

    # --- the pass -------------------------------------------------------------------------

    async def reconcile(
        self, body: Mapping[str, Any], *, trigger: str, for_kopf: bool = False
    ) -> Decision | None:
        """One pass for this job. With `for_kopf`, not-ready and invalid outcomes raise kopf's
        TemporaryError/PermanentError (kopf's retry bookkeeping for change handlers);
        otherwise a timer looks again."""
        key = _key(body)
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            return None  # being deleted: garbage collection takes the children
        started = time.monotonic()
        async with self._locks[key]:
            body = self._freshest(key, body)
            try:
                decision = await self._pass(key, body)
            except ApiError as err:
                self.metrics.reconcile_errors.labels(trigger, f"http-{err.status}").inc()
                logger.warning("reconcile %s/%s (%s): %s", *key, trigger, err)
                # A rejected request (e.g. an admission webhook's 4xx) will not pass on its
                # own soon: look again slowly instead of hammering the API server.
                delay = (
                    self.settings.api_retry_seconds
                    if err.transient
                    else self.settings.rejected_retry_seconds
                )
                if for_kopf:
                    raise kopf.TemporaryError(str(err), delay=delay) from err
                self.schedule(key, delay)
                return None
            finally:
                self.metrics.reconcile_seconds.labels(trigger).observe(time.monotonic() - started)
        if decision.invalid is not None:
            self.metrics.reconcile_errors.labels(trigger, "invalid-spec").inc()
            if for_kopf:
                raise kopf.PermanentError(decision.invalid)
        elif decision.waiting is not None and for_kopf:
            raise kopf.TemporaryError(
                decision.waiting, delay=self.settings.dependency_retry_seconds
            )
        return decision

    async def _pass(self, key: Key, body: JSON) -> Decision:
        observed = await self._observe(key, body)
        probably_new = not body.get("status") and not observed.ray_jobs
        outcomes: list[Applied] = []
        # A second round when applying found (or cleared) a conflict: the decision depends
        # on it (no RayJob while another controller owns one of our children).
        for _ in range(2):
            decision = decide(body, observed, self.settings, self.clock())
            outcomes += await self._apply(key, decision.apply, observed, probably_new)
            conflicts = tuple(
                f"{a.obj['kind']} {a.obj['metadata']['name']}"
                for a in outcomes
                if a.outcome is Outcome.CONFLICT
            )
            if conflicts == observed.conflicts:
                break
            blockers = self._blockers.get(key) or Blockers(_generation(body))
            self._blockers[key] = Blockers(
                blockers.generation, blockers.missing, conflicts, blockers.checked_at
            )
            observed = Observed(observed.ray_jobs, observed.missing_dependencies, conflicts)
            outcomes = [a for a in outcomes if a.outcome is not Outcome.CONFLICT]
        for name in decision.delete_ray_jobs:
            ref = {
                "apiVersion": "ray.io/v1",
                "kind": "RayJob",
                "metadata": {"name": name, "namespace": key[0]},
            }
            await self.api.delete(ref)
            self._applied.pop((key[0], "RayJob", name), None)
        await self._write_status(key, body, decision)
        events = list(decision.events) + _action_events(outcomes, decision.delete_ray_jobs)
        if decision.delete_self:
            events.append(
                Event(
                    EventType.NORMAL,
                    EventReason.TTL_EXPIRED,
                    "ttlSecondsAfterFinished passed: deleting the RLHFJob",
                )
            )
        self._post(body, events)
        if decision.delete_self:
            await self.api.delete(body)
            self.forget(key)
        elif decision.waiting is not None or observed.conflicts:
            self.schedule(key, self.settings.dependency_retry_seconds)
        elif decision.requeue_after is not None:
            self.schedule(key, decision.requeue_after)
        return decision

    async def _observe(self, key: Key, body: JSON) -> Observed:
        uid = (body.get("metadata") or {}).get("uid")
        ray_jobs = []
        for obj in list(self.ray_jobs.get(key) or ()):
            owner = next(
                (r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")),
                None,
            )
            # Ours, or an orphan with our name (adopted on apply); never a former job's.
            if owner is None or owner.get("uid") == uid:
                ray_jobs.append(obj)
        observed = Observed.of(ray_jobs)
        blockers = await self._blockers_for(key, body, observed)
        return Observed(observed.ray_jobs, blockers.missing, blockers.conflicts)

    async def _blockers_for(self, key: Key, body: JSON, observed: Observed) -> Blockers:
        """Check referenced ConfigMaps/PVCs exist, only while the attempt's RayJob does not
        (once pods run, they hold what they mounted), at most every dependency_retry_seconds."""
        generation = _generation(body)
        known = self._blockers.get(key)
        restarts = int((body.get("status") or {}).get("restarts") or 0)
        if observed.attempt(max(restarts, observed.latest_attempt)) is not None:
            return Blockers(generation)
        fresh = (
            known is not None
            and known.generation == generation
            and (
                not known.missing
                or time.monotonic() - known.checked_at < self.settings.dependency_retry_seconds
            )
        )
        if fresh and known is not None:
            return known
        missing = tuple(
            [label for ref, label in dependencies(body) if await self.api.get(ref) is None]
        )
        conflicts = known.conflicts if known is not None and known.generation == generation else ()
        self._blockers[key] = Blockers(generation, missing, conflicts, time.monotonic())
        return self._blockers[key]

    async def _apply(
        self, key: Key, desired: Iterable[Desired], observed: Observed, probably_new: bool
    ) -> list[Applied]:
        outcomes: list[Applied] = []
        for child in desired:
            cache_key = (key[0], child.kind, child.name)
            digest = desired_hash(child.obj) + repr(child.preserve)
            if self._applied.get(cache_key) == digest:
                continue  # applied before with this content (a deleted RayJob is forgotten)
            if child.kind == "RayJob" and any(a.outcome is Outcome.CONFLICT for a in outcomes):
                continue  # its pods would use another controller's objects
            rejected = self._rejected.get(cache_key)
            if rejected is not None and rejected[0] == digest and time.monotonic() < rejected[1]:
                raise rejected[2]  # the server said no to exactly this: do not ask again yet
            try:
                applied = await apply(self.api, child, probably_new=probably_new)
            except ApiError as err:
                if not err.transient:
                    until = time.monotonic() + self.settings.rejected_retry_seconds
                    self._rejected[cache_key] = (digest, until, err)
                raise
            self._rejected.pop(cache_key, None)
            self.metrics.children.labels(child.kind, applied.outcome.value).inc()
            outcomes.append(applied)
            if applied.outcome is Outcome.CONFLICT:
                self._applied.pop(cache_key, None)
            else:
                self._applied[cache_key] = digest
        return outcomes

    async def _write_status(self, key: Key, body: JSON, decision: Decision) -> None:
        patch = status_patch(body.get("status"), decision.status)
        if not patch:
            return
        updated = await self.api.patch_status(body, patch)
        if updated is not None:
            self._latest[key] = updated

    def _freshest(self, key: Key, body: Mapping[str, Any]) -> JSON:
        """The newer of the body we were handed and the one our last status patch returned:
        triggers may carry a snapshot older than our own last write."""
        latest = self._latest.get(key)
        if latest is None or latest["metadata"].get("uid") != body["metadata"].get("uid"):
            return dict(body)
        if _resource_version(latest) > _resource_version(body):
            return latest
        return dict(body)

    def _post(self, body: Mapping[str, Any], events: list[Event]) -> None:
        for event in events:
            kopf.event(
                kopf.Body(cast(kopf.RawBody, dict(body))),
                type=event.type.value,
                reason=event.reason.value,
                message=event.message[:1024],
            )

    # --- timers ---------------------------------------------------------------------------

    def schedule(self, key: Key, delay: float) -> None:
        """Reconcile `key` again after `delay` seconds (replaces an earlier timer)."""
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(max(0.0, delay), self._fire, key)

    def _fire(self, key: Key) -> None:
        self._timers.pop(key, None)
        task = asyncio.get_running_loop().create_task(self._requeue(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _requeue(self, key: Key) -> None:
        body = self.job_body(key)
        if body is None:
            self.forget(key)
            return
        try:
            await self.reconcile(body, trigger="timer")
        except Exception:  # a timer has nobody to report to but the log
            logger.exception("reconcile %s/%s (timer) failed", *key)
            self.schedule(key, self.settings.api_retry_seconds)

    def child_deleted(self, namespace: str, kind: str, name: str) -> None:
        """A watched child went away: apply it again when it is still desired."""
        self._applied.pop((namespace, kind, name), None)

    def forget(self, key: Key) -> None:
        """Drop what is remembered about a deleted job."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._blockers.pop(key, None)
        self._latest.pop(key, None)
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():
            del self._locks[key]
        for cache in (self._applied, self._rejected):
            for cache_key in [k for k in cache if k[0] == key[0] and _owned_by(k[2], key[1])]:
                del cache[cache_key]

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.api.close()


def _generation(body: Mapping[str, Any]) -> int | None:
    value = (body.get("metadata") or {}).get("generation")
    return int(value) if value is not None else None


def _owned_by(child_name: str, job: str) -> bool:
    return child_name.startswith(f"{job}-")


def _action_events(outcomes: list[Applied], deleted: tuple[str, ...]) -> list[Event]:
    by_outcome: defaultdict[Outcome, list[str]] = defaultdict(list)
    for applied in outcomes:
        by_outcome[applied.outcome].append(
            f"{applied.obj['kind']} {applied.obj['metadata']['name']}"
        )
    reasons = (
        (Outcome.CREATED, EventType.NORMAL, EventReason.CREATED, "created"),
        (Outcome.UPDATED, EventType.NORMAL, EventReason.UPDATED, "updated to match the spec"),
        (Outcome.ADOPTED, EventType.NORMAL, EventReason.ADOPTED, "adopted"),
    )
    events = [
        Event(kind, reason, f"{verb}: {', '.join(by_outcome[outcome])}")
        for outcome, kind, reason, verb in reasons
        if by_outcome[outcome]
    ]
    if deleted:
        events.append(
            Event(
                EventType.NORMAL,
                EventReason.DELETED,
                f"deleted finished RayJob {', '.join(deleted)}",
            )
        )
    return events
