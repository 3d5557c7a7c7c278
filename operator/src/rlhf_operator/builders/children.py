"""Every child of an RLHFJob, in the order they are applied (what a pod needs exists before
the RayJob that starts the pods)."""

from __future__ import annotations

from dataclasses import dataclass

from ..api.v1alpha1 import Allocation, RLHFJob
from ..settings import OperatorSettings
from .allocation import plan
from .common import JSON
from .configmap import build_config_map
from .network import build_network_policy
from .pvc import build_pvc
from .rayjob import build_ray_job
from .report import build_report, build_role, build_role_binding, build_service_account
from .secret import build_ray_token_secret
from .sizes import check_sizes


@dataclass(frozen=True)
class Children:
    allocation: Allocation
    # ServiceAccount, report ConfigMap, Role, RoleBinding, job ConfigMap, Ray token Secret,
    # NetworkPolicy[, PVC]: everything the RayJob's pods need, before them.
    support: list[JSON]
    ray_job: JSON

    @property
    def all(self) -> list[JSON]:
        return [*self.support, self.ray_job]


def render_children(
    job: RLHFJob,
    settings: OperatorSettings,
    *,
    attempt: int = 0,
    suspend: bool | None = None,
    allocation: Allocation | None = None,
) -> Children:
    """Pure. `allocation`: the job's plan when the caller has it (a reconcile pass planned
    it once), else planned here. Raises PlacementError / BuildError (both name the spec
    field) when impossible, or when an object would be too big for Kubernetes to store."""
    allocation = allocation if allocation is not None else plan(job.spec)
    support = [
        build_service_account(job),
        build_report(job),
        build_role(job),
        build_role_binding(job),
        build_config_map(job),
        build_ray_token_secret(job),
        # Before any pod exists, so that no pod of the job is ever reachable from outside it.
        build_network_policy(job, settings),
    ]
    pvc = build_pvc(job, settings)
    if pvc is not None:
        support.append(pvc)
    ray_job = build_ray_job(
        job,
        allocation,
        settings,
        attempt=attempt,
        suspend=job.spec.run_policy.suspend if suspend is None else suspend,
    )
    check_sizes(job, [*support, ray_job])
    return Children(allocation, support, ray_job)
