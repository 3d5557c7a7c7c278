"""Carries out `pipelines.decide_pipeline`: creates stage RLHFJobs, sets their suspend, writes
the pipeline's status (only when it changed). One pass at a time per pipeline; every trigger
(the pipeline created, edited or resumed after a restart, any event on it or on one of its
stage jobs, a timer) runs the same level-based pass. The RLHFJobs come from the operator's
watch cache (kopf fills it before any handler runs), so a restarted operator sees the stage
jobs it made and creates none twice; a create that still finds the name taken (409) is left
to the next pass, which reads what is there.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from rlhf_trainer.config.pipeline import stage_job_name

from ..api.v1alpha1 import EventReason, EventType
from ..kube.client import ApiError, KubeApi
from ..reconcile.decide import status_patch
from ..reconcile.pipelines import PipelineDecision, StageJob, decide_pipeline
from ..settings import OperatorSettings
from .reader import Key, job_key
from .timers import Backoff, Requeue

logger = logging.getLogger(__name__)


class PipelineController:
    def __init__(
        self,
        settings: OperatorSettings,
        api: KubeApi,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings, self.api, self.clock = settings, api, clock
        self.pipelines: Mapping[Any, Any] = {}  # kopf index: (ns, name) -> [pipeline bodies]
        self.jobs: Mapping[Any, Any] = {}  # kopf index: (ns, name) -> [RLHFJob bodies]
        self._locks: defaultdict[Key, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._timers = Requeue(self._requeue)
        self.backoff = Backoff(settings)
        # (pipeline uid, job name) of stage jobs this process created: a pass that runs before
        # the watch cache shows one does not ask for it again.
        self._created: set[tuple[str, str]] = set()

    def bind(self, pipelines: Mapping[Any, Any], jobs: Mapping[Any, Any]) -> None:
        self.pipelines, self.jobs = pipelines, jobs

    def _stage_jobs(self, key: Key, body: Mapping[str, Any]) -> dict[str, StageJob]:
        """The RLHFJobs named like the pipeline's stages, as the cache holds them, owned or
        not (a foreign job of such a name must be seen, to be left alone)."""
        uid = str((body.get("metadata") or {}).get("uid", ""))
        stages = ((body.get("spec") or {}).get("stages")) or []
        out: dict[str, StageJob] = {}
        for stage in stages:
            name = stage_job_name(key[1], str((stage or {}).get("name", "")))
            live = [
                b
                for b in list(self.jobs.get((key[0], name)) or ())
                if not (b.get("metadata") or {}).get("deletionTimestamp")
            ]
            if live:
                out[name] = StageJob.from_body(live[-1], uid)
        return out

    async def reconcile(self, body: Mapping[str, Any], *, trigger: str) -> PipelineDecision | None:
        key = job_key(body)
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None  # garbage collection takes the stage jobs
        async with self._locks[key]:
            decision = decide_pipeline(body, self._stage_jobs(key, body), self.clock())
            uid = str(meta.get("uid", ""))
            for job in decision.create:
                made = (uid, str(job["metadata"]["name"]))
                if made in self._created:
                    continue  # made by an earlier pass: the cache has not caught up yet
                try:
                    await self.api.create(job)
                except ApiError as err:
                    if err.status != 409:
                        raise
                    continue  # made before a restart, not yet in the cache: read next pass
                self._created.add(made)
                self._post(body, EventReason.CREATED, f"created RLHFJob {job['metadata']['name']}")
            for name, suspend in decision.suspend:
                ref = {
                    "apiVersion": body.get("apiVersion", "rlhf.dev/v1alpha1"),
                    "kind": "RLHFJob",
                    "metadata": {"name": name, "namespace": key[0]},
                }
                await self.api.patch(ref, {"spec": {"runPolicy": {"suspend": suspend}}})
            patch = status_patch(body.get("status"), decision.status)
            if patch:
                await self.api.patch_status(body, patch)
        logger.debug("pipeline %s/%s (%s): %s", *key, trigger, decision.status.phase)
        return decision

    def _post(self, body: Mapping[str, Any], reason: EventReason, message: str) -> None:
        kopf.event(
            kopf.Body(cast(kopf.RawBody, dict(body))),
            type=EventType.NORMAL.value,
            reason=reason.value,
            message=message[:1024],
        )

    def body(self, key: Key) -> Mapping[str, Any] | None:
        bodies = [
            b
            for b in list(self.pipelines.get(key) or ())
            if not (b.get("metadata") or {}).get("deletionTimestamp")
        ]
        return bodies[-1] if bodies else None

    def forget(self, uid: str) -> None:
        """Drop what is remembered about a deleted pipeline."""
        self._created = {made for made in self._created if made[0] != uid}

    def schedule(self, key: Key, delay: float) -> None:
        """A pass for `key` after `delay` seconds (replaces an earlier timer)."""
        self._timers.schedule(key, delay)

    async def _requeue(self, key: Key) -> None:
        body = self.body(key)
        if body is None:
            return
        try:
            await self.reconcile(body, trigger="timer")
        except Exception:
            logger.exception("pipeline %s/%s (timer) failed", *key)
            self.schedule(key, self.backoff.failed(key)[1])
            return
        self.backoff.succeeded(key)

    async def close(self) -> None:
        await self._timers.close()
