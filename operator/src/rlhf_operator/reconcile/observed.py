"""What the operator observed about an RLHFJob's world, as plain immutable values.

RayJobs and the trainer's report come from watches (kopf indexes); missing dependencies,
conflicting children, children the API server refused and the pods of a starting attempt from
the operator's last checks. `evaluate` and `decide` read only these values, so they stay
pure and testable with tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from rlhf_trainer.config.report import MAX_VALUE_BYTES, OUTCOME_KEY, PROGRESS_KEY

from ..api.v1alpha1 import TrainerOutcome, TrainerReport
from ..builders.common import ATTEMPT_LABEL
from .inputs import Producer


class DeploymentStatus(StrEnum):
    """KubeRay's RayJob `status.jobDeploymentStatus` (ray.io/v1, KubeRay 1.7)."""

    NEW = ""
    INITIALIZING = "Initializing"
    RUNNING = "Running"
    COMPLETE = "Complete"
    FAILED = "Failed"
    VALIDATION_FAILED = "ValidationFailed"
    SUSPENDING = "Suspending"
    SUSPENDED = "Suspended"
    RETRYING = "Retrying"
    WAITING = "Waiting"


class RayJobStatus(StrEnum):
    """Ray's job status (`status.jobStatus`), as KubeRay copies it."""

    NEW = ""
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


def _enum(kind: type[StrEnum], value: Any) -> StrEnum | str:
    text = str(value or "")
    try:
        return kind(text)
    except ValueError:
        return text  # a newer KubeRay's value: kept, treated as "in progress"


@dataclass(frozen=True)
class RayJobObservation:
    name: str
    attempt: int
    uid: str = ""
    suspend: bool = False
    deployment_status: StrEnum | str = DeploymentStatus.NEW
    job_status: StrEnum | str = RayJobStatus.NEW
    reason: str | None = None
    message: str | None = None
    cluster_name: str | None = None
    job_id: str | None = None
    dashboard_url: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    deleting: bool = False
    # The RayCluster as KubeRay mirrors it into the RayJob (status.rayClusterStatus).
    cluster_state: str | None = None
    cluster_reason: str | None = None
    ready_workers: int | None = None
    desired_workers: int | None = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> RayJobObservation:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        cluster = status.get("rayClusterStatus") or {}
        try:
            attempt = int((meta.get("labels") or {}).get(ATTEMPT_LABEL, "0"))
        except ValueError:
            attempt = 0
        return cls(
            name=str(meta.get("name", "")),
            attempt=attempt,
            uid=str(meta.get("uid", "")),
            suspend=bool(spec.get("suspend", False)),
            deployment_status=_enum(DeploymentStatus, status.get("jobDeploymentStatus")),
            job_status=_enum(RayJobStatus, status.get("jobStatus")),
            reason=status.get("reason"),
            message=status.get("message"),
            cluster_name=status.get("rayClusterName"),
            job_id=status.get("jobId"),
            dashboard_url=status.get("dashboardURL"),
            start_time=status.get("startTime"),
            end_time=status.get("endTime"),
            deleting=bool(meta.get("deletionTimestamp")),
            cluster_state=cluster.get("state"),
            cluster_reason=cluster.get("reason"),
            ready_workers=cluster.get("readyWorkerReplicas"),
            desired_workers=cluster.get("desiredWorkerReplicas"),
        )

    @property
    def succeeded(self) -> bool:
        return (
            self.deployment_status is DeploymentStatus.COMPLETE
            and self.job_status is RayJobStatus.SUCCEEDED
        )

    @property
    def failed(self) -> bool:
        # KubeRay's "Complete" means the Ray job reached *a* terminal state, not success.
        return self.deployment_status in {
            DeploymentStatus.FAILED,
            DeploymentStatus.VALIDATION_FAILED,
        } or (
            self.deployment_status is DeploymentStatus.COMPLETE
            and self.job_status in {RayJobStatus.FAILED, RayJobStatus.STOPPED}
        )

    @property
    def starting(self) -> bool:
        """Not suspended, not running, not finished: its pods are expected to come up."""
        done = {
            DeploymentStatus.RUNNING,
            DeploymentStatus.COMPLETE,
            DeploymentStatus.FAILED,
            DeploymentStatus.VALIDATION_FAILED,
        }
        return not self.suspend and not self.deleting and self.deployment_status not in done

    @property
    def cluster_progress(self) -> str:
        """`Ray cluster x: 1/2 workers ready` (as far as KubeRay has reported)."""
        name = self.cluster_name or "(not created yet)"
        if self.desired_workers is None:
            return f"Ray cluster {name}"
        return f"Ray cluster {name}: {self.ready_workers or 0}/{self.desired_workers} workers ready"

    @property
    def failure(self) -> str:
        parts = [p for p in (self.reason, self.message) if p]
        return ": ".join(parts) or f"job status {self.job_status or 'unknown'}"


class PodTrouble(StrEnum):
    """Why a pod of a starting attempt does not run, as the kubelet and scheduler say it."""

    UNSCHEDULABLE = "Unschedulable"
    IMAGE_PULL = "ImagePull"
    CONFIG = "Config"
    CRASH_LOOP = "CrashLoop"


_WAITING_TROUBLE = {
    "ErrImagePull": PodTrouble.IMAGE_PULL,
    "ImagePullBackOff": PodTrouble.IMAGE_PULL,
    "InvalidImageName": PodTrouble.IMAGE_PULL,
    "ErrImageNeverPull": PodTrouble.IMAGE_PULL,
    # A missing Secret or ConfigMap (key) named in env/envFrom, or a bad container config.
    "CreateContainerConfigError": PodTrouble.CONFIG,
    "CreateContainerError": PodTrouble.CONFIG,
    "RunContainerError": PodTrouble.CONFIG,
    "CrashLoopBackOff": PodTrouble.CRASH_LOOP,
}


@dataclass(frozen=True)
class PodProblem:
    trouble: PodTrouble
    # "Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    message: str


# The pod condition the API server (Eviction API, scheduler preemption) or the node (taint
# manager, kubelet shutdown or eviction) sets on a pod it is about to delete (Kubernetes >= 1.26).
DISRUPTION_TARGET = "DisruptionTarget"


@dataclass(frozen=True)
class PodObservation:
    name: str
    phase: str = ""
    problems: tuple[PodProblem, ...] = ()
    # "EvictionByEvictionAPI: Eviction API: evicting" while DisruptionTarget is True.
    disruption: str | None = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> PodObservation:
        status = obj.get("status") or {}
        problems: list[PodProblem] = []
        disruption = None
        for cond in status.get("conditions") or []:
            if (cond.get("type"), cond.get("status")) == (DISRUPTION_TARGET, "True"):
                said = [str(p) for p in (cond.get("reason"), cond.get("message")) if p]
                disruption = ": ".join(said) or DISRUPTION_TARGET
            if (cond.get("type"), cond.get("status")) == ("PodScheduled", "False") and cond.get(
                "reason"
            ) == "Unschedulable":
                text = f"Unschedulable: {cond.get('message') or 'no node fits'}"
                problems.append(PodProblem(PodTrouble.UNSCHEDULABLE, text))
        containers = [*(status.get("initContainerStatuses") or [])]
        containers += status.get("containerStatuses") or []
        for container in containers:
            waiting = (container.get("state") or {}).get("waiting") or {}
            trouble = _WAITING_TROUBLE.get(str(waiting.get("reason")))
            if trouble is not None:
                detail = f": {waiting['message']}" if waiting.get("message") else ""
                text = f"container {container.get('name')}: {waiting['reason']}{detail}"
                problems.append(PodProblem(trouble, text))
        return cls(
            name=str((obj.get("metadata") or {}).get("name", "")),
            phase=str(status.get("phase") or ""),
            problems=tuple(problems),
            disruption=disruption,
        )


@dataclass(frozen=True)
class ApplyFailure:
    """The API server refused to create or update a child."""

    kind: str
    name: str
    code: int
    reason: str  # the Status reason: NotFound, Forbidden, Invalid, ...
    message: str  # the API server's own words

    @property
    def summary(self) -> str:
        """`RayJob x-r0: HTTP 404 NotFound: ...`, with a hint where the cause is well known."""
        text = f"{self.kind} {self.name}: HTTP {self.code} {self.reason}: {self.message}"
        if self.code == 404 and "could not find the requested resource" in self.message:
            # A 404 for a collection: the API (a CRD) is not installed, not a missing object.
            if self.kind == "RayJob":
                return f"{text} (is KubeRay installed? the ray.io/v1 RayJob CRD is missing)"
            return f"{text} (the {self.kind} API is not served)"
        return text


def _json_object(text: Any) -> dict[str, Any] | None:
    if not isinstance(text, str) or len(text.encode()) > MAX_VALUE_BYTES:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_report(data: Mapping[str, Any] | None) -> TrainerReport | None:
    """The trainer's report from its ConfigMap's data (rlhf_trainer.config.report), validated
    against the status models; a key that does not parse is dropped (a broken or hostile
    trainer can only blank its own progress). None when there is nothing to report."""
    data = data or {}
    progress = _json_object(data.get(PROGRESS_KEY))
    outcome_doc = _json_object(data.get(OUTCOME_KEY))
    if progress is None and outcome_doc is None:
        return None
    outcome = None
    if outcome_doc is not None:
        try:
            outcome = TrainerOutcome.model_validate(outcome_doc)
        except ValidationError:
            outcome = None
    report = TrainerReport()
    if progress is not None:
        try:
            # The outcome only ever comes from its own key.
            report = TrainerReport.model_validate({**progress, "outcome": None})
        except ValidationError:
            report = TrainerReport()
    return report.model_copy(update={"outcome": outcome})


@dataclass(frozen=True)
class Observed:
    """The RayJobs of one RLHFJob (every attempt still around), plus what blocks it."""

    ray_jobs: tuple[RayJobObservation, ...] = ()
    # "ConfigMap math-reward (spec.models.rewardFunction.configMapRef)", ...
    missing_dependencies: tuple[str, ...] = ()
    # Objects with our children's names that the job does not provably own.
    conflicts: tuple[str, ...] = ()
    # Children the API server refused on the last try (retried with backoff).
    apply_failures: tuple[ApplyFailure, ...] = ()
    # The pods of the current attempt while it starts (from the pod watch).
    pods: tuple[PodObservation, ...] = ()
    # The pods of the current attempt that are being disrupted (DisruptionTarget=True: evicted,
    # preempted, their node drained or lost), whatever the attempt's state.
    disrupted: tuple[PodObservation, ...] = ()
    # The trainer's report (its ConfigMap, validated); None while there is none.
    report: TrainerReport | None = None
    # The RLHFJobs the spec names with `fromJob` (from the watch cache); None: no such job.
    producers: Mapping[str, Producer | None] = field(default_factory=dict)

    @classmethod
    def of(cls, ray_jobs: Iterable[Mapping[str, Any]], **kwargs: Any) -> Observed:
        observations = sorted(
            (RayJobObservation.from_object(o) for o in ray_jobs), key=lambda o: o.attempt
        )
        return cls(ray_jobs=tuple(observations), **kwargs)

    @property
    def latest_attempt(self) -> int:
        return max((o.attempt for o in self.ray_jobs), default=0)

    def attempt(self, number: int) -> RayJobObservation | None:
        return next((o for o in self.ray_jobs if o.attempt == number and not o.deleting), None)
