"""Placement of an RLHFJob: the shared layout (`rlhf_trainer.config.layout`) as an `Allocation`.

The layout is computed once, by the same pure function the trainer uses for its Ray placement
groups and `rlhf plan` prints, so the GPUs the operator requests are the devices the trainer
places: per role, in total, and in pods (one Ray worker group per pod shape; the head pod has
no devices). With `placement.auto` the allocation carries the choice's reasons.
"""

from __future__ import annotations

from rlhf_trainer.config import JobConfig, LayoutError, plan_layout

from ..api.v1alpha1 import Allocation, WorkerGroupAllocation


class PlacementError(ValueError):
    """A layout that cannot be built. `field` is the spec field to change (camelCase path)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def plan(cfg: JobConfig) -> Allocation:
    """The allocation for a job config (an RLHFJob's spec is one). Pure; raises
    PlacementError naming the field to change when no layout exists."""
    try:
        layout = plan_layout(cfg)
    except LayoutError as err:
        first = err.problems[0]
        raise PlacementError(f"spec.{first.path}", first.message) from err
    return Allocation(
        device=layout.device,
        gpus_per_role={g.name: g.devices for g in layout.groups},
        rollout_engines=layout.rollout_engines,
        tensor_parallel_size=layout.tensor_parallel_size,
        worker_groups=[
            WorkerGroupAllocation(
                name=pod.name,
                replicas=pod.replicas,
                gpus_per_pod=pod.devices,
                roles=list(pod.roles),
            )
            for pod in layout.pods
        ],
        total_gpus=layout.total_devices,
        reasons=dict(layout.auto.reasons) if layout.auto is not None else {},
    )
