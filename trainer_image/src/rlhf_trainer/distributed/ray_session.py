"""The job's Ray session: start or join Ray, size and place each rank, and shut down only a
Ray this process started. Shared by the online cluster (`cluster.TrainingCluster`) and the
offline one (`offline`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import ray

from rlhf_trainer.config import Device

from .groups import ClusterError, PlacedGroup
from .plan import PlacementPlan

# Logical CPUs one rank asks for: small on CPU machines so that every role fits on 2 cores
# (threads are set explicitly), one per rank on GPU nodes.
CPUS_PER_RANK = {Device.CPU: 0.05, Device.GPU: 1.0}


def start_ray(plan: PlacementPlan, device: Device, *, address: str | None = None) -> None:
    """Join the cluster (`address`/RAY_ADDRESS, as on KubeRay) or start a local Ray whose
    resources make room for the plan; then check the plan's devices exist."""
    if not ray.is_initialized():
        target = address or os.environ.get("RAY_ADDRESS")
        if target:
            with _keep_sigterm_handler():
                ray.init(address=target, log_to_driver=_verbose())
        else:
            kwargs: dict[str, Any] = {
                "num_cpus": os.cpu_count() or 1,
                "include_dashboard": False,
                "log_to_driver": _verbose(),
                "object_store_memory": 1 * 2**30 if device is Device.CPU else None,
            }
            # Ray starts worker processes at niceness 15 by default; here the workers are the
            # training itself, so they run at the driver's priority.
            os.environ.setdefault("RAY_worker_niceness", "0")
            if device is Device.CPU:
                if plan.resource == "GPU":
                    kwargs["num_gpus"] = plan.total_devices
                else:
                    kwargs["resources"] = {plan.resource: plan.total_devices}
            with _keep_sigterm_handler():
                ray.init(**{k: v for k, v in kwargs.items() if v is not None})
            # Only a Ray this process started is shut down at the end (see shutdown_ray).
            _STARTED.append(True)
    available = ray.cluster_resources().get(plan.resource, 0)  # type: ignore[no-untyped-call]
    if available < plan.total_devices:
        raise ClusterError(
            f"the job needs {plan.total_devices} x {plan.resource} (placement below) but the Ray "
            f"cluster has {available:g}; on a CPU machine set placement.device: cpu and a custom "
            f"placement.rayResource (e.g. GPU-like)\n{plan.describe()}"
        )


_STARTED: list[bool] = []


@contextlib.contextmanager
def _keep_sigterm_handler() -> Iterator[None]:
    """`ray.init` replaces the driver's SIGTERM handler with one that exits at once; the
    runner's (a stop request honoured at the next step boundary, with a checkpoint: see
    `rlhf_trainer.context.preemption`) must survive it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        # Only a handler someone installed on purpose; else Ray's (exit through atexit, which
        # shuts Ray down) beats the default (die on the spot).
        if callable(previous):
            signal.signal(signal.SIGTERM, previous)


def _verbose() -> bool:
    return os.environ.get("RLHF_VERBOSE", "") not in ("", "0")


def place_groups(plan: PlacementPlan, cpus: float) -> dict[str, PlacedGroup]:
    """Every device group's placement groups, largest placement units first (as the layout
    packs pods: first-fit decreasing), so tensor-parallel units find whole nodes."""
    placed: dict[str, PlacedGroup] = {}
    try:
        for group in sorted(plan.groups, key=lambda g: -g.bundles_per_set if g.set_size else 0):
            placed[group.name] = PlacedGroup(group, plan.resource, cpus)
    except BaseException:
        for done in placed.values():
            done.remove()
        raise
    return placed


def rank_threads() -> int:
    """Torch threads per model rank on CPU: actor and critic (and the forward passes of actor,
    reference and critic) run at the same time, so each gets half the cores; oversubscribed
    OpenMP threads spin and slow everything down. `RLHF_THREADS_PER_RANK` overrides."""
    override = os.environ.get("RLHF_THREADS_PER_RANK")
    if override:
        return max(1, int(override))
    return max(1, (os.cpu_count() or 1) // 2)


def shutdown_ray() -> None:
    """Stop the local Ray that `start_ray` started (a joined or pre-started one is left)."""
    if _STARTED and ray.is_initialized():
        ray.shutdown()
    _STARTED.clear()
