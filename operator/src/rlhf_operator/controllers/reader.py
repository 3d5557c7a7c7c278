"""Observing one job's world for a pass: its RayJobs and the trainer's report from the watch
caches (kopf indexes), each taken only when this job provably owns it; the pods of a starting
attempt (for what keeps them from running) from the pod watch's index; and, only while they
matter and at most every `dependency_retry_seconds`, the objects its spec references (before
the attempt's RayJob exists). What the API server refused comes from the `Applier`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..api.v1alpha1 import JobInput, TrainerReport
from ..builders.common import report_name
from ..builders.volumes import referenced_objects
from ..kube.client import KubeApi
from ..reconcile.inputs import Producer, named_jobs, pinned_inputs, with_inputs
from ..reconcile.observed import ApplyFailure, Observed, PodObservation, parse_report
from ..reconcile.parse import Parsed
from ..settings import ANNOTATION_PREFIX, DIFF_BASE_KEY, OperatorSettings

Key = tuple[str, str]  # (namespace, job name)
JSON = dict[str, Any]
# (attempt label, pod) for each pod of a job with a problem or a disruption, sorted.
PodTroubles = tuple[tuple[str, PodObservation], ...]


@dataclass(frozen=True)
class Blockers:
    """What kept the job's RayJob from being created, as of one spec generation."""

    generation: int | None
    missing: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    checked_at: float = 0.0


# What is kept of a watched object, beyond its status: the operator reads no more of it.
_KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "labels",
    "ownerReferences",
    "deletionTimestamp",
    "resourceVersion",
    "generation",
    "creationTimestamp",
)
_DIFF_BASE = f"{ANNOTATION_PREFIX}/{DIFF_BASE_KEY}"


def without_bookkeeping(body: Mapping[str, Any]) -> JSON:
    """An object as the watch caches keep it: without `managedFields` and kopf's diff-base
    annotation (together often larger than what the operator reads of the object), shallow
    otherwise. Kept for every RLHFJob and child the operator watches: memory per job."""
    meta = dict(body.get("metadata") or {})
    meta.pop("managedFields", None)
    annotations = meta.get("annotations")
    if annotations and _DIFF_BASE in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != _DIFF_BASE}
    return {**body, "metadata": meta}


def ray_job_summary(body: Mapping[str, Any]) -> JSON:
    """A RayJob as the watch cache keeps it: what `RayJobObservation` and the ownership check
    read (metadata, spec.suspend, status). Its spec is the largest part of it (pod templates,
    tens of KB in memory) and is ours: it is what we applied."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return {
        "metadata": {k: meta[k] for k in _KEPT_METADATA if k in meta},
        "spec": {"suspend": spec["suspend"]} if "suspend" in spec else {},
        "status": body.get("status") or {},
    }


def job_key(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _attempt(body: Mapping[str, Any], observed: Observed) -> int:
    restarts = int((body.get("status") or {}).get("restarts") or 0)
    return max(restarts, observed.latest_attempt)


def dependencies(parsed: Parsed) -> list[tuple[JSON, str]]:
    """Objects the spec references that the pods cannot start without: (object ref, label).
    The same list the pods mount (builders/volumes.py); Secrets are not read by the operator:
    a missing one shows on the pods (CreateContainerConfigError). None for an invalid spec."""
    if parsed.job is None:
        return []
    job = with_inputs(parsed.job, pinned(parsed.body))
    namespace = job.namespace
    return [
        (
            {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}},
            f"{kind} {name} ({why})",
        )
        for kind, name, why in referenced_objects(job)
    ]


def pinned(body: Mapping[str, Any]) -> tuple[JobInput, ...]:
    """The inputs recorded on status, for the roles the spec still names the same job for."""
    named = dict(named_jobs(body))
    return tuple(i for i in pinned_inputs(body) if named.get(i.role) == i.from_job)


def controlled_by(obj: Mapping[str, Any], uid: Any) -> bool:
    """`obj`'s controller reference names the job with this UID (labels and names can be
    made by anyone who may create objects in the namespace; a UID cannot be chosen)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    owner = next((r for r in refs if r.get("controller")), None)
    return owner is not None and bool(uid) and owner.get("uid") == uid


class Reader:
    def __init__(self, api: KubeApi, settings: OperatorSettings) -> None:
        self.api, self.settings = api, settings
        self.ray_jobs: Mapping[Any, Any] = {}  # kopf index: (ns, job) -> [RayJob bodies]
        self.reports: Mapping[Any, Any] = {}  # kopf index: (ns, job) -> [report ConfigMaps]
        self.jobs: Mapping[Any, Any] = {}  # kopf index: (ns, name) -> [RLHFJob bodies]
        # kopf index: (ns, job) -> [(attempt label, PodObservation)], one per pod
        self.pods: Mapping[Any, Any] = {}
        self._blockers: dict[Key, Blockers] = {}
        # What each job's last pass read of its pods (`pod_troubles`), for `pods_changed`.
        self._pod_troubles: dict[Key, PodTroubles] = {}

    async def observe(
        self, key: Key, parsed: Parsed, refused: tuple[ApplyFailure, ...] = ()
    ) -> Observed:
        body = parsed.body
        uid = (body.get("metadata") or {}).get("uid")
        # Never an orphan, a former job's or anyone else's RayJob, whatever its labels.
        ray_jobs = [o for o in list(self.ray_jobs.get(key) or ()) if controlled_by(o, uid)]
        observed = Observed.of(
            ray_jobs, report=self._report(key, uid), producers=self._producers(key[0], body)
        )
        blockers = await self._blockers_for(key, parsed, observed)
        self.mark_pods_read(key)
        return replace(
            observed,
            missing_dependencies=blockers.missing,
            conflicts=blockers.conflicts,
            apply_failures=refused,
            pods=self._pods_for(key, body, observed),
            disrupted=self._disrupted(key, body, observed),
        )

    def _producers(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Producer | None]:
        """The jobs named by `fromJob`, as the watch cache has them (the newest live one of
        each name)."""
        out: dict[str, Producer | None] = {}
        for _, name in named_jobs(body):
            live = [
                b
                for b in list(self.jobs.get((namespace, name)) or ())
                if not (b.get("metadata") or {}).get("deletionTimestamp")
            ]
            newest = max(
                live,
                key=lambda b: str((b.get("metadata") or {}).get("creationTimestamp", "")),
                default=None,
            )
            out[name] = Producer.from_body(name, newest)
        return out

    def _report(self, key: Key, uid: Any) -> TrainerReport | None:
        """The trainer's report: the data of `<job>-report`, if this job owns it."""
        name = report_name(key[1])
        for obj in list(self.reports.get(key) or ()):
            if (obj.get("metadata") or {}).get("name") == name and controlled_by(obj, uid):
                return parse_report(obj.get("data"))
        return None

    def set_conflicts(self, key: Key, parsed: Parsed, conflicts: tuple[str, ...]) -> None:
        blockers = self._blockers.get(key) or Blockers(parsed.generation)
        self._blockers[key] = replace(blockers, conflicts=conflicts)

    async def _blockers_for(self, key: Key, parsed: Parsed, observed: Observed) -> Blockers:
        """Check referenced ConfigMaps/PVCs exist, only while the attempt's RayJob does not
        (once pods run, they hold what they mounted), at most every dependency_retry_seconds."""
        body, generation = parsed.body, parsed.generation
        known = self._blockers.get(key)
        # Conflicts are what the last apply found, this generation's (`set_conflicts`).
        conflicts = known.conflicts if known is not None and known.generation == generation else ()
        if observed.attempt(_attempt(body, observed)) is not None:
            return Blockers(generation, conflicts=conflicts)
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
            [label for ref, label in dependencies(parsed) if await self.api.get(ref) is None]
        )
        self._blockers[key] = Blockers(generation, missing, conflicts, time.monotonic())
        return self._blockers[key]

    def _pods_for(
        self, key: Key, body: Mapping[str, Any], observed: Observed
    ) -> tuple[PodObservation, ...]:
        """The pods of the current attempt while it starts, as the pod watch has them; none
        otherwise (a running attempt's pods are KubeRay's business)."""
        attempt = _attempt(body, observed)
        current = observed.attempt(attempt)
        if current is None or not current.starting:
            return ()
        return tuple(
            sorted(
                (pod for label, pod in list(self.pods.get(key) or ()) if label == str(attempt)),
                key=lambda pod: pod.name,
            )
        )

    def _disrupted(
        self, key: Key, body: Mapping[str, Any], observed: Observed
    ) -> tuple[PodObservation, ...]:
        """The pods of the current attempt with a DisruptionTarget condition (an eviction, a
        drain, a preemption): the attempt is being preempted, whatever the trainer manages to
        say before its pods go."""
        attempt = str(_attempt(body, observed))
        pods = (pod for label, pod in list(self.pods.get(key) or ()) if label == attempt)
        return tuple(sorted((p for p in pods if p.disruption), key=lambda pod: pod.name))

    def pod_troubles(self, key: Key) -> PodTroubles:
        """All a pass can read of the job's pods: those with a problem or a disruption, by
        attempt (a pod without either adds nothing to a diagnosis, whatever its phase)."""
        troubled = [
            (label, pod)
            for label, pod in list(self.pods.get(key) or ())
            if pod.problems or pod.disruption
        ]
        return tuple(sorted(troubled, key=lambda entry: (entry[0], entry[1].name)))

    def mark_pods_read(self, key: Key) -> None:
        """A pass reads the job's pods now: `pods_changed` compares with what it read."""
        self._pod_troubles[key] = self.pod_troubles(key)

    def pods_changed(self, key: Key) -> bool:
        """Whether the pod watch now says something about the job's pods that its last pass
        did not read: a pod that came Pending or went Running without a problem changes
        nothing. True for a job no pass has observed yet."""
        seen = self._pod_troubles.get(key)
        return seen is None or seen != self.pod_troubles(key)

    def forget(self, key: Key) -> None:
        self._blockers.pop(key, None)
        self._pod_troubles.pop(key, None)
