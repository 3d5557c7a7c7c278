"""GPU memory arithmetic for `placement.auto`: what one GPU holds for each role (pure).

Per parameter, mixed-precision training with Adam holds bf16 weights (2 bytes), bf16 gradients
(2) and fp32 master weights + two moments (12): 16 bytes (the ZeRO paper's 16 x Psi). ZeRO
shards across the role's N ranks:

    stage 2: weights stay whole, gradients and Adam states are sharded:  2 + 14 / N
    stage 3: everything is sharded:                                       16 / N
    Adam offload moves the optimizer state to host memory, where DeepSpeed's CPU Adam keeps
    fp32 master weights, both moments and fp32 gradients: 16 bytes per parameter, sharded.
    The pods' memory is `placement.resources.workerMemoryPerGpu` per GPU; the offloaded
    states may take at most 90% of it (the rest: the process, Ray, data loading).

Frozen models (reference, reward) hold bf16 weights only, sharded by ZeRO-3 (the trainer gives
them stage 3 exactly when training uses it), whole otherwise. A vLLM engine holds its weights
split over its tensor-parallel GPUs, and needs at least as much again for the KV cache.

What is left for these on one GPU: its memory less 10% and 4 GiB for the CUDA context, NCCL
buffers, allocator fragmentation and activations (micro batches of a few sequences, with
gradient checkpointing for the large models).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
WEIGHT_BYTES = 2  # bf16
GRAD_BYTES = 2
ADAM_BYTES = 12  # fp32 master weights, first and second moments
HOST_OFFLOAD_BYTES = 16  # the same on the host, plus fp32 gradients for CPU Adam
HOST_FRACTION = 0.9
_UNITS: dict[str, float] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_UNITS |= {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "m": 10**-3, "": 1}
RESERVE_FRACTION = 0.10
RESERVE_GIB = 4.0
# An engine keeps at least as much KV cache as it holds weights, or it batches too little.
KV_FACTOR = 2.0


@dataclass(frozen=True)
class Zero:
    """A DeepSpeed strategy: ZeRO stage (2 or 3) and whether Adam states live on the host."""

    stage: int
    offload: bool

    @property
    def label(self) -> str:
        return f"ZeRO-{self.stage}" + (" + Adam offload" if self.offload else "")


# Fastest first: ZeRO-2 gathers no parameters; offloading runs Adam on the CPUs.
ZERO_CHOICES = (Zero(2, False), Zero(3, False), Zero(2, True), Zero(3, True))
LEANEST = ZERO_CHOICES[-1]


def usable_gib(gpu_gib: float) -> float:
    """What DeepSpeed's states may take on one GPU of `gpu_gib`."""
    return gpu_gib * (1 - RESERVE_FRACTION) - RESERVE_GIB


def trained_gib(params: int, ranks: int, zero: Zero) -> float:
    """Per GPU: a model trained on `ranks` GPUs (actor, critic)."""
    weights, grads = WEIGHT_BYTES * params, GRAD_BYTES * params
    adam = 0 if zero.offload else ADAM_BYTES * params
    if zero.stage == 3:
        return (weights + grads + adam) / ranks / GIB
    return (weights + (grads + adam) / ranks) / GIB


def host_gib(params: int, ranks: int, zero: Zero) -> float:
    """Per GPU, in host memory: the offloaded Adam states (0 without offload)."""
    return HOST_OFFLOAD_BYTES * params / ranks / GIB if zero.offload else 0.0


def quantity_bytes(quantity: str) -> float:
    """A Kubernetes quantity (validated by the spec's pattern) in units: `10Mi` -> 10485760."""
    digits = quantity.rstrip("KiMGTPkm")
    return float(digits) * _UNITS[quantity[len(digits) :]]


def quantity_gib(quantity: str) -> float:
    """A Kubernetes quantity (validated by the spec's pattern) in GiB: `64Gi` -> 64.0."""
    return quantity_bytes(quantity) / GIB


def frozen_gib(params: int, ranks: int, zero: Zero) -> float:
    """Per GPU: a frozen model (reference, reward) on `ranks` GPUs."""
    whole = WEIGHT_BYTES * params / GIB
    return whole / ranks if zero.stage == 3 else whole


def engine_weights_gib(params: int, tensor_parallel: int) -> float:
    """Per GPU: a vLLM engine's weights split over its tensor-parallel GPUs."""
    return WEIGHT_BYTES * params / tensor_parallel / GIB
