"""Carries out reconcile decisions: the operator's imperative shell around `reconcile.decide`.

Every trigger (an RLHFJob created, edited or resumed, any event on it, an event on one of its
RayJobs, a timer for deadlines/TTL/retries) runs the same level-based pass for that job, one at
a time per job. API requests happen only for what changed: children already applied with the
same content (remembered in memory) are not sent again, RayJobs are read from the watch cache
(a kopf index), and the status is patched only when it differs. An idle job costs nothing.

A child the API server refuses (a missing CRD, a quota, a webhook) is not asked for again
before its backoff ends (doubling per failure, capped, reset by a success); the refusal is
observed like anything else, so it shows on status and in an Event. The pods of a starting
attempt come from one watch of all the jobs' pods (a kopf index): a pod's change runs its job's
pass, so a waiting job needs neither a timer nor a request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from ..api.v1alpha1 import EventReason, EventType, Phase
from ..kube.apply import Outcome
from ..kube.client import ApiError, KubeApi
from ..reconcile.decide import Decision, decide, status_patch
from ..reconcile.events import Event
from ..reconcile.observed import Observed
from ..settings import OperatorSettings
from .applier import Applier
from .bookkeeping import action_events, fingerprint, merged, resource_version
from .first_status import FirstStatus, kuberay_reported
from .metrics import Metrics
from .parse_memo import PARSE_MEMO_SIZE, ParseMemo
from .reader import Key, Reader, job_key
from .stored import StoredJob
from .timers import Backoff, PassSlots, Requeue

logger = logging.getLogger(__name__)

JSON = dict[str, Any]


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
        # kopf index: (ns, name) -> [names of the jobs taking a model from it (fromJob)]
        self.consumers: Mapping[Any, Any] = {}
        self.applier = Applier(api, settings, metrics)
        self.reader = Reader(api, settings)
        self._locks: defaultdict[Key, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Passes at work at once (settings.pass_limit), taken after the job's own lock; a new
        # job's first pass first, the others after at most a quarter of the parse memo's worth
        # of them: theirs is still there (between a job's two parses come at most that many
        # first passes and as many others, each a new entry where it misses).
        self._passes = PassSlots(
            settings.pass_limit, give_way=PARSE_MEMO_SIZE // 4, on_idle=self._run_idle_hooks
        )
        # Called whenever the last pass at work ends with none waiting (the process's garbage
        # collector does its work then: handlers/collector.py).
        self.when_idle: list[Callable[[], None]] = []
        # Passes in a row that failed (a request other than applying a child, or a bug).
        self.backoff = Backoff(settings)
        # The job as our last status patch returned it, until its watch event comes; packed
        # as the watch cache keeps jobs (in a burst thousands wait for their event at once).
        self._latest: dict[Key, StoredJob] = {}
        # Per job: (UID, generation, digest of the status) as its last pass left it.
        self._decided: dict[Key, tuple[str, Any, bytes]] = {}
        self._timers = Requeue(self._requeue, coalesce=True)
        # The trigger of each pass asked for and not started yet (for the metrics).
        self._triggers: dict[Key, str] = {}
        # Jobs this operator deleted (their TTL passed) whose DELETED event has not come: the
        # index still holds them, and a pass queued behind the deleting one would make all
        # their children again (the applier forgot them) for an owner that is gone.
        self._deleting: dict[Key, str] = {}
        self.first_status = FirstStatus(settings.first_status_grace_seconds)
        # A job's parse, taken over by its next passes while its spec stays the same.
        self._parses = ParseMemo(settings)

    def bind(
        self,
        jobs: Mapping[Any, Any],
        ray_jobs: Mapping[Any, Any],
        reports: Mapping[Any, Any],
        pods: Mapping[Any, Any],
    ) -> None:
        self.jobs, self.reader.ray_jobs, self.reader.reports = jobs, ray_jobs, reports
        self.reader.jobs, self.reader.pods = jobs, pods

    def passes_idle(self) -> bool:
        """No pass at work or waiting to start."""
        return self._passes.idle

    def _run_idle_hooks(self) -> None:
        for hook in self.when_idle:
            hook()

    def pods_matter(self, key: Key, body: Mapping[str, Any]) -> bool:
        """A pod event concerns the job's pass: not once it finished (its pods are gone or
        going, and say nothing it does not already know), nor when its pods say nothing the
        last pass did not read (`Reader.pods_changed`)."""
        phase = (body.get("status") or {}).get("phase")
        finished = phase in {p.value for p in Phase if p.is_finished}
        return not finished and self.reader.pods_changed(key)

    def job_bodies(self) -> Iterator[Mapping[str, Any]]:
        for store in list(self.jobs.values()):
            yield from list(store)

    def job_body(self, key: Key) -> Mapping[str, Any] | None:
        """The live RLHFJob of this name. A job deleted and created again under the same name
        may be in the index twice for a moment (kopf handles the two objects' events
        independently): the newer one is the live one, and a pass on the old one would
        create children for a job that no longer exists."""
        store = self.jobs.get(key)
        deleted = self._deleting.get(key)
        bodies: list[Mapping[str, Any]] = [
            b
            for b in store or ()
            if not (b.get("metadata") or {}).get("deletionTimestamp")
            and (b.get("metadata") or {}).get("uid") != deleted
        ]
        if not bodies:
            return None
        return max(
            bodies,
            key=lambda b: (str(b["metadata"].get("creationTimestamp", "")), resource_version(b)),
        )

    # --- the pass -------------------------------------------------------------------------

    def enqueue(self, key: Key, trigger: str) -> None:
        """A pass for `key` soon, in a task of its own: the kopf handler that asks returns at
        once, and its worker lets go of the watch event it holds (a whole RayJob, pod
        templates and all: thousands of them at once in a burst, waiting their turn, were
        most of the operator's memory). Events that come before the pass starts share it."""
        self._triggers.setdefault(key, trigger)
        self.schedule(key, 0.0)

    async def reconcile(self, body: Mapping[str, Any], *, trigger: str) -> Decision | None:
        """One pass for this job, on `body` (or the newer one our last status patch
        returned). Whatever fails is tried again by the timer, after the one retry policy's
        backoff (`retry_later`); nothing is left to kopf's retries."""
        key = job_key(body)
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            return None  # being deleted: garbage collection takes the children
        async with self._locks[key], self._passes.slot(urgent=False):
            return await self._reconcile(key, self._freshest(key, body), trigger)

    async def _reconcile_queued(self, key: Key) -> None:
        """The pass `enqueue` or a timer asked for, on the job as the watch cache has it when
        the pass starts."""
        urgent = self._triggers.get(key) == "create"
        async with self._locks[key], self._passes.slot(urgent=urgent):
            self._timers.started(key)
            trigger = self._triggers.pop(key, "timer")
            body = self.job_body(key)
            if body is None:
                self.forget(key)  # gone, or being deleted
                return
            await self._reconcile(key, self._freshest(key, body), trigger)

    async def _reconcile(self, key: Key, body: JSON, trigger: str) -> Decision | None:
        started = time.monotonic()
        try:
            decision = await self._pass(key, body)
        except ApiError as err:
            self.metrics.reconcile_errors.labels(trigger, f"http-{err.status}").inc()
            logger.warning("reconcile %s/%s (%s): %s", *key, trigger, err)
            self.retry_later(key)
            return None
        finally:
            self.metrics.reconcile_seconds.labels(trigger).observe(time.monotonic() - started)
        self.backoff.succeeded(key)
        if decision.invalid is not None:
            self.metrics.reconcile_errors.labels(trigger, "invalid-spec").inc()
        return decision

    def retry_later(self, key: Key) -> None:
        """A pass for `key` failed: look again after the backoff (later still if it keeps
        failing: an API server in trouble, or a webhook that says no, is not helped by a
        request every few seconds)."""
        _, delay = self.backoff.failed(key)
        self.schedule(key, delay)

    async def _pass(self, key: Key, body: JSON) -> Decision:
        parsed = self._parses.parse(body)  # once per pass: read by everything below
        observed = await self.reader.observe(key, parsed, self.applier.reported_failures(key))
        probably_new = not body.get("status") and not observed.ray_jobs
        decision = decide(parsed, observed, self.settings, self.clock())
        if self.applier.would_send(key, decision.apply) and not self._still_there(key, body):
            return decision  # deleted (or replaced) meanwhile: act on nothing
        outcomes, failures = await self.applier.apply_all(
            key, decision.apply, probably_new=probably_new
        )
        conflicts = tuple(
            f"{a.obj['kind']} {a.obj['metadata']['name']} ({a.owner})"
            for a in outcomes
            if a.outcome is Outcome.CONFLICT
        )
        # Applying found (or cleared) a conflict or a refusal, which the decision depends on
        # (no RayJob while one of its children is missing or someone else's): the decision is
        # stale. Its status is not written; the next pass, at once, decides with what was found.
        stale = (set(conflicts), set(failures)) != (
            set(observed.conflicts),
            set(observed.apply_failures),
        )
        if stale:
            self.reader.set_conflicts(key, parsed, conflicts)
        self.applier.keep_only(key, decision.apply)
        for name in decision.delete_ray_jobs:
            ref = {
                "apiVersion": "ray.io/v1",
                "kind": "RayJob",
                "metadata": {"name": name, "namespace": key[0]},
            }
            await self.api.delete(ref)
            self.applier.forget_child(key, "RayJob", name)
        # A new job's first status waits for KubeRay's first word on its RayJob (a status
        # written before, RayJob unseen or not yet looked at by KubeRay, is out of date within
        # a second): one pass and one status patch less per job (first_status.py). Only while
        # the job has nothing on status, so nothing it should say is lost meanwhile.
        first_wait = self._first_status_wait(key, body, decision, observed)
        deferred = first_wait is not None
        if not stale and not deferred:
            await self._write_status(key, body, decision)
            due = self.first_status.written(key)
            if due is not None:
                self._timers.cancel_due(key, due)  # its wait's timer: what it waited for came
        events = [] if stale or deferred else list(decision.events)
        events += action_events(outcomes, decision.delete_ray_jobs)
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
            # Marked before the request, so that its DELETED event, which unmarks it, cannot
            # come first.
            self._deleting[key] = str((body.get("metadata") or {}).get("uid", ""))
            try:
                await self.api.delete(body)
            except ApiError:
                del self._deleting[key]
                raise
            self.forget(key)
            return decision
        # One timer per job: the earliest of everything that will want another look.
        waits = [] if decision.requeue_after is None else [decision.requeue_after]
        if first_wait is not None:
            waits.append(first_wait)
        if stale:
            waits.append(0.0)
        if decision.waiting is not None or observed.conflicts:
            waits.append(self.settings.dependency_retry_seconds)
        waits += [r.retry_at - time.monotonic() for r in self.applier.refusals(key)]
        if waits:
            self.schedule(key, min(waits))
        return decision

    def _first_status_wait(
        self, key: Key, body: JSON, decision: Decision, observed: Observed
    ) -> float | None:
        """Seconds a new job's first status still waits: its RayJob is applied (the applier
        remembers it; a deleted one is forgotten) and not yet in the watch cache, or KubeRay
        has not written its status yet."""
        if body.get("status"):
            return None
        made = [c for c in decision.apply if c.kind == "RayJob" and self.applier.applied(key, c)]
        if not made:
            return None
        seen = {o.name for o in observed.ray_jobs}
        return self.first_status.waits(
            key, all(c.name in seen for c in made), kuberay_reported(observed.ray_jobs)
        )

    def _still_there(self, key: Key, body: JSON) -> bool:
        """Before anything is created or changed on a job's behalf: the job, this very one
        (same UID), is still the live one in the watch cache. A pass may run on a body from
        before the job's deletion (queued behind another pass, or handed over by a late
        event); its children would be made again for a job that is gone, and stand in the way
        of a new job of that name. The watch cache costs no request; a deletion it has not
        seen yet leaves children whose owner reference names a UID that no longer exists,
        which the garbage collector removes (as it would if a GET had answered just before
        the deletion)."""
        live = self.job_body(key)
        return live is not None and (live.get("metadata") or {}).get("uid") == (
            body.get("metadata") or {}
        ).get("uid")

    async def _write_status(self, key: Key, body: JSON, decision: Decision) -> None:
        patch = status_patch(body.get("status"), decision.status)
        # What the job looks like once written (remembered before the request: its watch
        # event may come before its answer).
        self._decided[key] = fingerprint(body, merged(body.get("status") or {}, patch))
        if not patch:
            return
        updated = await self.api.patch_status(body, patch)
        if updated is None:
            return
        # Kept until its watch event comes (`nothing_new`), unless it came first (then it is
        # in the index already) or the job is gone: nothing would ever drop a copy kept then
        # (a whole job, ~17 KB, for each job whose last patch's event beat its answer).
        live = self.job_body(key)
        if live is not None and resource_version(live) < resource_version(updated):
            self._latest[key] = StoredJob(updated)

    def nothing_new(self, body: Mapping[str, Any]) -> bool:
        """The event brings nothing a pass would act on: `body` is the job as the last pass
        left it (same UID, spec generation and status: the echo of our own status patch, or
        of kopf's bookkeeping), or older than what our last status patch returned (watch
        events come in order: the newer version's own event follows). What the pass reads
        besides the job (children, pods, report, the jobs it takes a model from) comes with
        its own events. Forgets the body our patch returned once the watch brought it."""
        key = job_key(body)
        latest = self._latest.get(key)
        uid = (body.get("metadata") or {}).get("uid")
        if latest is not None and latest["metadata"].get("uid") == uid:
            if 0 <= resource_version(body) < resource_version(latest):
                return True
            # The watch caught up with our patch: the index holds the job as new as it (a
            # whole RLHFJob a job is not kept twice).
            del self._latest[key]
        remembered = self._decided.get(key)
        return remembered is not None and remembered == fingerprint(body, body.get("status"))

    def trigger_of(self, event_type: str | None, body: Mapping[str, Any]) -> str:
        """What a job event is, for the metrics: a new job (`create`: added, or found by
        kopf's first listing with nothing on its status yet), one there when the operator
        started (`resume`), a spec edit (`update`: a generation the last pass did not see),
        anything else (`job-event`)."""
        if event_type in {None, "ADDED"}:
            return "create" if event_type == "ADDED" or not body.get("status") else "resume"
        decided = self._decided.get(job_key(body))
        generation = (body.get("metadata") or {}).get("generation")
        return "update" if decided is not None and decided[1] != generation else "job-event"

    def _freshest(self, key: Key, body: Mapping[str, Any]) -> JSON:
        """The newer of the body we were handed and the one our last status patch returned:
        triggers may carry a snapshot older than our own last write."""
        latest = self._latest.get(key)
        if latest is None or latest["metadata"].get("uid") != body["metadata"].get("uid"):
            return dict(body)
        if resource_version(latest) > resource_version(body):
            return dict(latest)
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
        """Reconcile `key` again after `delay` seconds (unless a timer is due sooner)."""
        self._timers.schedule(key, delay)

    async def _requeue(self, key: Key) -> None:
        try:
            await self._reconcile_queued(key)
        except Exception:  # a timer has nobody to report to but the log
            logger.exception("reconcile %s/%s failed", *key)
            self.metrics.reconcile_errors.labels("timer", "exception").inc()
            self.retry_later(key)

    def wake_consumers(self, key: Key) -> None:
        """A pass soon for every job whose `fromJob` names this one (its phase or output may
        have changed). Through the timers: one pass each, however many events arrive."""
        for consumer in set(self.consumers.get(key) or ()):
            if (key[0], consumer) != key:
                self.schedule((key[0], str(consumer)), 0.0)

    def child_deleted(self, key: Key, kind: str, name: str) -> None:
        """A watched child of the job went away: apply it again when it is still desired."""
        self.applier.forget_child(key, kind, name)

    async def after_child_deleted(self, key: Key, trigger: str) -> None:
        """A pass for the job whose child went away, if the job still exists. Garbage
        collection deletes a deleted job's children, and their watch events may be seen
        before the job's own: the index may still hold the job, and a pass on it would create
        its children again. One GET (deletions are rare) settles it."""
        indexed = self.job_body(key)
        if indexed is None:
            return
        ref = {
            "apiVersion": indexed.get("apiVersion", "rlhf.dev/v1alpha1"),
            "kind": "RLHFJob",
            "metadata": {"name": key[1], "namespace": key[0]},
        }
        current = await self.api.get(ref)
        same = current is not None and current["metadata"].get("uid") == (
            indexed.get("metadata") or {}
        ).get("uid")
        if not same or current is None:
            return  # gone (or replaced): its own events will follow
        await self.reconcile(current, trigger=trigger)

    def deleted(self, key: Key, uid: str) -> None:
        """The watch saw the job deleted: the index no longer holds it."""
        if self._deleting.get(key) == uid:
            del self._deleting[key]
        if self.job_body(key) is None:  # unless a new job of that name took its place
            self.forget(key)

    def forget(self, key: Key) -> None:
        """Drop what is remembered about a deleted job."""
        self._timers.cancel(key)
        self._triggers.pop(key, None)
        self._latest.pop(key, None)
        self._decided.pop(key, None)
        self.first_status.forget(key)
        self._parses.forget(*key)
        self.backoff.succeeded(key)
        self.reader.forget(key)
        self.applier.forget(key)
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():
            del self._locks[key]

    async def close(self) -> None:
        await self._timers.close()
        await self.api.close()
