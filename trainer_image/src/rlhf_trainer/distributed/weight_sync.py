"""Actor -> vLLM weight sync after every update.

- `object-store` (colocated engines, the hybrid engine): actor rank 0 puts its weights, packed
  in large flat buffers, into Ray's shared-memory object store once; each engine reads them
  there without a copy and reloads in place. This is the CPU analogue of OpenRLHF's CUDA-IPC
  handles: no network hop, one copy in total.
- `broadcast` (engines on their own devices): actor rank 0 and the engines form one process
  group (gloo on CPU, NCCL on GPU) and the weights are broadcast in flat buckets, loaded by
  the engines bucket by bucket.

With partial rollout (`vllm_pausable`) the engines are paused around the loads, their
requests in flight kept, and resumed by the new weights.

`cluster.weight_sync_mode` picks: broadcast between separate GPUs, the object store otherwise.
With ZeRO-3 every actor rank takes part (parameters are gathered one by one); only rank 0
sends. A tensor-parallel engine's ranks each receive the full tensors (by the object store or
as members of the broadcast group) and keep their own shards (see `vllm_extension`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray

from .groups import RoleGroup

OBJECT_STORE, BROADCAST = "object-store", "broadcast"


class WeightSync:
    def __init__(
        self,
        actor: RoleGroup,
        engines: RoleGroup,
        *,
        mode: str,
        backend: str,
        dtype: str,
        tensor_parallel_size: int = 1,
        pausing: bool = False,
    ) -> None:
        if mode not in (OBJECT_STORE, BROADCAST):
            raise ValueError(
                f"weight-sync mode must be {OBJECT_STORE} or {BROADCAST}; got {mode!r}"
            )
        self.actor, self.engines, self.mode, self.backend, self.dtype = (
            actor,
            engines,
            mode,
            backend,
            dtype,
        )
        self.tp = tensor_parallel_size
        # Partial rollout: the engines' requests in flight are paused around each load.
        self.pausing = pausing
        self.plan: Any = None

    def setup(self) -> None:
        if self.mode != BROADCAST:
            return
        address, port = ray.get(self.actor.workers[0].master_address.remote())
        # Actor rank 0 is rank 0; engine i's tensor-parallel ranks follow at 1 + i * tp.
        world = 1 + self.engines.size * self.tp
        refs = [
            w.init_weight_group.remote(self.backend, address, port, world)
            for w in self.actor.workers
        ]
        refs += [
            e.init_weight_group.remote(self.backend, address, port, 1 + i * self.tp, world)
            for i, e in enumerate(self.engines.workers)
        ]
        ray.get(refs)
        dtype = self.dtype
        self.plan = self.actor.call(lambda w: w.broadcast_plan.remote(dtype)).result()[0]

    def sync(self) -> float:
        """Push the actor's current weights into every engine; returns the seconds it took."""
        start = time.perf_counter()
        if self.pausing:
            ray.get([e.pause.remote() for e in self.engines.workers])
        if self.mode == OBJECT_STORE:
            streams = self._pack()
            # Each bucket goes to every engine as soon as rank 0 has put it; an engine loads
            # its buckets in order while the next ones are being packed.
            loads = [e.load_packed.remote(ref) for ref in streams[0] for e in self.engines.workers]
            for other in streams[1:]:
                ray.get(list(other))
            ray.get(loads)
        else:
            sends = [w.broadcast_weights.remote(self.dtype) for w in self.actor.workers]
            receives = [e.receive_weights.remote(self.plan) for e in self.engines.workers]
            ray.get(sends + receives)
        if self.pausing:
            ray.get([e.resume.remote() for e in self.engines.workers])
        self._reset_prefix_caches()
        return time.perf_counter() - start

    def _pack(self) -> list[Any]:
        """Every actor rank's stream of packed buckets (rank 0's hold the weights; with
        ZeRO-3 the other ranks only help gather)."""
        return [
            w.packed_weights.options(num_returns="streaming").remote(self.dtype)
            for w in self.actor.workers
        ]

    def stage(self) -> Callable[[], float] | None:
        """Object-store mode, in two halves: now, the actor ranks put their current weights
        in the object store (before their next update can change them); the function
        returned loads them into the engines when called, and returns its seconds (async
        rollout calls it once the batches queued on the engines are done). None in
        broadcast mode, whose two sides must run at the same time."""
        if self.mode != OBJECT_STORE:
            return None
        streams = self._pack()
        buckets = list(streams[0])
        # Wait for every rank, so that none starts its next update while the gather runs.
        for other in streams[1:]:
            ray.get(list(other))

        def deliver() -> float:
            start = time.perf_counter()
            # Each engine loads the buckets in order.
            ray.get([e.load_packed.remote(ref) for ref in buckets for e in self.engines.workers])
            self._reset_prefix_caches()
            return time.perf_counter() - start

        return deliver

    def _reset_prefix_caches(self) -> None:
        # The engines' cached prefix blocks hold keys and values computed with the old weights:
        # served again, a shared prompt prefix would be attended with stale KV. Dropped after
        # every update (a no-op with prefix caching off, as in deterministic mode).
        ray.get([e.reset_prefix_cache.remote() for e in self.engines.workers])
