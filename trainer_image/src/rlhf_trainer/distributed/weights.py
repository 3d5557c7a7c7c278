"""The actor's weights as HF checkpoint tensors: gathered (ZeRO-3), LoRA merged, bucketed.

Every rank of the actor iterates the same parameters in the same order (ZeRO-3 gathers are
collective); only rank 0 keeps the tensors. Names are the base model's checkpoint names, which
is what vLLM's loader and `save_pretrained` expect: peft's `base_model.model.` prefix and
`.base_layer` are removed, and a LoRA layer's weight is sent as `W + scale * B @ A`. Under
QLoRA, `W` is the 4-bit NF4 base dequantised (`models.qlora.dequantized`): what leaves the
actor is always a full-precision model.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from rlhf_trainer.models.qlora import dequantized

PEFT_PREFIX = "base_model.model."
# Flat buffers of about this size are broadcast at once (fewer collectives than per tensor).
BUCKET_BYTES = 64 * 2**20
# Through the object store: one shared-memory object per bucket, streamed (the engines load
# a bucket while the actor puts the next).
OBJECT_STORE_BUCKET_BYTES = 256 * 2**20


@dataclass(frozen=True)
class TensorMeta:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def unwrap(model: nn.Module) -> nn.Module:
    """The user module inside a DeepSpeed engine."""
    inner = getattr(model, "module", model)
    return inner if isinstance(inner, nn.Module) else model


def is_zero3_param(param: Tensor) -> bool:
    return hasattr(param, "ds_id")


@contextlib.contextmanager
def gathered(params: list[Tensor]) -> Iterator[None]:
    """Full parameters inside the block (ZeRO-3 all-gather), a no-op for ordinary tensors."""
    if not any(is_zero3_param(p) for p in params):
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        yield


def checkpoint_name(name: str) -> str:
    if name.startswith(PEFT_PREFIX):
        name = name[len(PEFT_PREFIX) :]
    return name.replace(".base_layer.", ".")


def _lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    return {
        name: module
        for name, module in model.named_modules()
        if hasattr(module, "lora_A") and hasattr(module, "base_layer")
    }


def iter_weights(
    model: nn.Module, *, rank: int, dtype: torch.dtype
) -> Iterator[tuple[str, Tensor]]:
    """(checkpoint name, full tensor in `dtype`) on rank 0; other ranks only take part."""
    model = unwrap(model)
    lora = _lora_layers(model)
    for name, param in model.named_parameters():
        if ".lora_" in name:
            continue  # folded into its base layer below
        owner = name.rsplit(".", 2)[0] if ".base_layer." in name else None
        extra: list[Tensor] = []
        if owner in lora and name.endswith("weight"):
            extra = [p for p in lora[owner].parameters() if p is not param]
        with gathered([param, *extra]):
            if rank != 0:
                continue
            tensor = dequantized(param)
            if extra:
                module = lora[owner]  # type: ignore[index]
                for adapter in getattr(module, "active_adapters", ["default"]):
                    tensor = tensor + module.get_delta_weight(adapter).to(tensor.dtype)  # type: ignore[operator]
            yield checkpoint_name(name), tensor.detach().to(dtype).contiguous().cpu()


def state_dict_for_export(model: nn.Module, *, rank: int, dtype: torch.dtype) -> dict[str, Tensor]:
    return dict(iter_weights(model, rank=rank, dtype=dtype))


def buckets(
    weights: Iterator[tuple[str, Tensor]], limit: int = BUCKET_BYTES
) -> Iterator[list[tuple[str, Tensor]]]:
    """Group consecutive tensors of one dtype into buckets of about `limit` bytes."""
    bucket: list[tuple[str, Tensor]] = []
    size = 0
    for name, tensor in weights:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and (size + nbytes > limit or bucket[0][1].dtype != tensor.dtype):
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def flatten(bucket: list[tuple[str, Tensor]]) -> tuple[Tensor, list[TensorMeta]]:
    metas = [TensorMeta(n, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for n, t in bucket]
    return torch.cat([t.reshape(-1) for _, t in bucket]), metas


def unflatten(flat: Tensor, metas: list[TensorMeta]) -> list[tuple[str, Tensor]]:
    out, offset = [], 0
    for meta in metas:
        out.append((meta.name, flat[offset : offset + meta.numel].view(meta.shape)))
        offset += meta.numel
    return out


Packed = list[tuple[TensorMeta, np.ndarray]]


def pack(bucket: list[tuple[str, Tensor]]) -> Packed:
    """A bucket as raw-byte numpy views of its tensors: Ray stores numpy arrays in shared
    memory with one copy and hands them to readers without another."""
    return [
        (
            TensorMeta(name, str(t.dtype).removeprefix("torch."), tuple(t.shape)),
            t.contiguous().view(torch.uint8).numpy(),
        )
        for name, t in bucket
    ]


def unpack(packed: Packed) -> list[tuple[str, Tensor]]:
    """Tensors viewing the arrays (no copy); they may be read-only shared memory."""
    out = []
    with warnings.catch_warnings():
        # Read-only is fine: the loader copies into the model's own parameters.
        warnings.simplefilter("ignore", UserWarning)
        for meta, raw in packed:
            tensor = torch.from_numpy(raw).view(getattr(torch, meta.dtype)).view(meta.shape)
            out.append((meta.name, tensor))
    return out


def new_group(backend: str, address: str, port: int, rank: int, world_size: int) -> object:
    """A process group outside torch.distributed's default world, for weight broadcasts.

    The actor and the vLLM engines live in different torch.distributed worlds (or none), so
    the group is built from its own TCPStore. The master does not wait for workers at start
    (they join when their own call arrives).
    """
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore(  # type: ignore[attr-defined]
        address,
        port,
        world_size,
        is_master=rank == 0,
        timeout=timedelta(minutes=10),
        wait_for_workers=False,
    )
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, timedelta(minutes=10))
    if backend == "nccl":
        return dist.ProcessGroupNCCL(store, rank, world_size)  # type: ignore[call-arg]
    raise ValueError(f"weight-sync backend must be gloo or nccl; got {backend!r}")


def broadcast(group: object, tensor: Tensor) -> None:
    # The list form of ProcessGroupGloo.broadcast raises TypeError; this form works for both.
    work = group.broadcast(tensor, 0)  # type: ignore[attr-defined]
    work.wait()
