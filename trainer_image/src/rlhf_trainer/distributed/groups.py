"""A device group's placement groups, a role's ranks as Ray actors in them, and calls fanned
out over the ranks.

`PlacedGroup` creates the placement groups `plan.GroupPlan` describes and says on which bundle
each rank sits. `RoleGroup` hides Ray from the driver loop: calls return `Pending` handles whose
`result()` blocks, so independent stages (e.g. actor and reference log-probs) run at the same
time. A call names the worker method itself (`group.call(lambda w: w.build.remote())`), never
by a string.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import ray
import torch
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from torch import Tensor

from .plan import GroupPlan, RoleShare

PLACEMENT_TIMEOUT_S = 120.0
# A rank's slot: the placement group and the bundle index it runs on.
Slot = tuple[PlacementGroup, int]
# One rank's remote call: its actor handle -> the object ref, e.g. `lambda w: w.ping.remote()`.
RankCall = Callable[[Any], Any]
# The same with the rank's shard of a batch: `lambda w, shard: w.log_probs.remote(shard)`.
ShardCall = Callable[[Any, dict[str, Tensor]], Any]


class ClusterError(RuntimeError):
    """The cluster cannot run this job as placed (resources, start-up)."""


class PlacedGroup:
    """The placement groups of one device group: `plan.sets` groups of `plan.bundles_per_set`
    bundles, each bundle one device (`resource`) plus `cpus` per role sharing it. Created in
    order, so a failure removes what was already placed."""

    def __init__(self, plan: GroupPlan, resource: str, cpus: float) -> None:
        self.plan = plan
        key = "GPU" if resource == "GPU" else resource
        bundle = {key: 1.0, "CPU": cpus * len(plan.shares)}
        self.pgs: list[PlacementGroup] = []
        try:
            for _ in range(plan.sets):
                pg = placement_group(
                    [dict(bundle) for _ in range(plan.bundles_per_set)], strategy=plan.strategy
                )
                self.pgs.append(pg)
                ray.get(pg.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError as err:
            self.remove()
            shape = f"{plan.sets} x {plan.bundles_per_set}" if plan.set_size else plan.devices
            raise ClusterError(
                f"placement group {plan.name!r} ({shape} x {bundle}, {plan.strategy}) was not "
                f"placed within {PLACEMENT_TIMEOUT_S:.0f} s; cluster resources: "
                f"{ray.available_resources()}"  # type: ignore[no-untyped-call]
            ) from err
        except BaseException:
            self.remove()
            raise

    def slots(self, share: RoleShare) -> list[Slot]:
        return [(self.pgs[i], bundle) for i, bundle in self.plan.slots(share)]

    def remove(self) -> None:
        for pg in self.pgs:
            with contextlib.suppress(Exception):  # best effort: it may be gone already
                remove_placement_group(pg)
        self.pgs = []


class Pending:
    """Results of calls in flight; `result()` waits and combines them."""

    def __init__(self, refs: list[Any], combine: Callable[[list[Any]], Any] = list) -> None:
        self.refs, self.combine = refs, combine

    def result(self) -> Any:
        return self.combine(ray.get(self.refs))


def actor_options(
    slot: Slot,
    resource: str,
    fraction: float,
    cpus: float,
    env: dict[str, str],
    concurrency: int = 1,
) -> dict[str, Any]:
    pg, bundle = slot
    options: dict[str, Any] = {
        "num_cpus": cpus,
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=bundle
        ),
        "runtime_env": {"env_vars": env},
        # One call at a time, except where a role's calls must overlap (a pausable engine).
        "max_concurrency": concurrency,
    }
    if resource == "GPU":
        options["num_gpus"] = fraction
    elif fraction:
        options["resources"] = {resource: fraction}
    return options


class RoleGroup:
    """One Ray actor of `worker_cls` per slot (rank i on `slots[i]`)."""

    def __init__(
        self,
        role: str,
        worker_cls: type,
        slots: Sequence[Slot],
        *,
        resource: str,
        fraction: float,
        cpus: float,
        env: dict[str, str],
        args: Sequence[Any] = (),
        distributed: bool = True,
        concurrency: int = 1,
    ) -> None:
        self.role = role
        remote_cls: Any = ray.remote(worker_cls)
        self.workers: list[Any] = []
        ranks = len(slots)
        try:
            for rank, slot in enumerate(slots):
                options = actor_options(slot, resource, fraction, cpus, env, concurrency)
                name_args = (role, rank, ranks, *args) if distributed else tuple(args)
                self.workers.append(remote_cls.options(**options).remote(*name_args))
            if distributed:
                address, port = ray.get(self.workers[0].master_address.remote())
                ray.get([w.init_distributed.remote(address, port) for w in self.workers])
        except BaseException:
            self.kill()  # the caller never gets this group, so it cannot clean it up
            raise

    @property
    def size(self) -> int:
        return len(self.workers)

    def call(self, remote: RankCall) -> Pending:
        """The same call on every rank; result: the list of the ranks' results."""
        return Pending([remote(w) for w in self.workers])

    def call_rank0(self, remote: RankCall) -> Pending:
        return Pending([remote(self.workers[0])], lambda r: r[0])

    def map_batch(self, remote: ShardCall, batch: dict[str, Tensor]) -> Pending:
        """Split `batch` rows evenly over the ranks, call, and concatenate the `[b, ...]`
        results in row order (data-parallel inference)."""
        shards = split_rows(batch, self.size)
        refs = [remote(w, s) for w, s in zip(self.workers, shards, strict=True)]
        return Pending(refs, lambda parts: torch.cat(parts))

    def kill(self) -> None:
        for worker in self.workers:
            with contextlib.suppress(Exception):  # best effort: it may be gone already
                ray.kill(worker, no_restart=True)
        self.workers = []


def split_rows(batch: dict[str, Tensor], parts: int) -> list[dict[str, Tensor]]:
    """`parts` contiguous shards of equal size (the last ones smaller if rows don't divide)."""
    rows = next(iter(batch.values())).shape[0]
    bounds = [rows * i // parts for i in range(parts + 1)]
    return [{k: v[bounds[i] : bounds[i + 1]] for k, v in batch.items()} for i in range(parts)]
