"""What the operator observed about an RLHFJob's world, as plain immutable values.

RayJobs come from the watch (a kopf index); missing dependencies and foreign-owned children
from the operator's last checks. `compute_status` and `decide` read only these values, so they
stay pure and testable with tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .builders.common import ATTEMPT_LABEL


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


@dataclass(frozen=True)
class Observed:
    """The RayJobs of one RLHFJob (every attempt still around), plus what blocks it."""

    ray_jobs: tuple[RayJobObservation, ...] = ()
    # "ConfigMap math-reward (spec.models.rewardFunction.configMapRef)", ...
    missing_dependencies: tuple[str, ...] = ()
    # Children with our names that another controller owns.
    conflicts: tuple[str, ...] = ()

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
