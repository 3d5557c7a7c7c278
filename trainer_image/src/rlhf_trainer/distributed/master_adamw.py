"""AdamW over fp32 master copies of bf16 weights, with gradient clipping, in one fused pass.

What DeepSpeed does at ZeRO stage 0 with bf16 (its `FP16_UnfusedOptimizer` around our fused
torch AdamW), minus the passes that cost without changing the update: a min/max scan of every
gradient for fp16 overflow (bf16 has fp32's range; a non-finite norm is the check that is left),
a freshly allocated fp32 copy of every gradient each step, an unscale multiply at loss scale 1,
and a separate clip multiply. Here the gradient norm is one pass over the bf16 gradients, the
gradients are widened chunk by chunk into one reused fp32 buffer, and the clip coefficient goes
to torch's fused AdamW kernel as its `grad_scale` (the kernel divides each gradient by it while
it updates). Size L (91M parameters, bf16, 2 cores; `bench/train_step.py --configs 0,0-ds`):
0.171 s a step under DeepSpeed's wrapper, 0.102 s here.

The update is the same arithmetic (masters copied from the weights before they are cast to
bf16, where DeepSpeed copied the cast ones: a random init keeps its fp32 values): AdamW on fp32
masters, gradients clipped to `max_grad_norm`
by `max / (norm + 1e-6)` when above it, bf16 weights rounded from the masters after each step; a
step whose gradient norm is not finite is skipped (`overflow`, which the DeepSpeed engine reads
to leave its step counter and the schedule alone). The checkpoint is a torch optimizer state
dict with each parameter's `master` beside its moments; `load_state_dict` also takes the one
DeepSpeed's wrapper saved (`fp32_groups` + `optimizer_state_dict`), so a run checkpointed
before this optimizer resumes on it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

# fp32 gradient elements widened at a time: 1 MiB of scratch, whatever the model's size. The
# optimizer alone on size L's 111 tensors (91M elements, 2 cores), seconds a step by chunk:
# 32Ki 0.212, 64Ki 0.120, 128Ki 0.098, 256Ki 0.096, 1Mi 0.107, 4Mi 0.104 (small ones pay the
# per-piece dispatch; large ones fall out of cache between widening, update and copy back).
CHUNK_ELEMENTS = 256 * 1024
CLIP_EPS = 1e-6  # torch's clip_grad_norm_ and DeepSpeed's
STATE_KEYS = ("master", "exp_avg", "exp_avg_sq")

# (offset in the chunk's fp32 buffer, parameter, first element, end element) of one piece.
Piece = tuple[int, Tensor, int, int]


class MasterWeightAdamW(torch.optim.Optimizer):
    """AdamW for low-precision parameters, keeping fp32 masters and moments (16 bytes a
    parameter with the bf16 weight and gradient, as DeepSpeed's wrapper) plus one fp32 chunk."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        max_grad_norm: float = 0.0,
    ) -> None:
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)
        self.max_grad_norm = max_grad_norm
        self.overflow = False
        self._global_grad_norm: float | None = None
        for p in self._params():
            if not p.is_contiguous():  # the update works on flat views of each parameter
                raise ValueError(
                    f"MasterWeightAdamW needs contiguous parameters; got one of shape "
                    f"{tuple(p.shape)} with strides {p.stride()}"
                )
            self.state[p] = {
                "step": torch.zeros((), dtype=torch.float32, device=p.device),
                "master": p.detach().to(torch.float32, copy=True),
                "exp_avg": torch.zeros_like(p, dtype=torch.float32),
                "exp_avg_sq": torch.zeros_like(p, dtype=torch.float32),
            }
        first = next(self._params(), None)
        device = first.device if first is not None else torch.device("cpu")
        self._scratch = torch.empty(CHUNK_ELEMENTS, device=device)

    def _params(self) -> Iterator[Tensor]:
        for group in self.param_groups:
            yield from group["params"]

    @torch.no_grad()
    def grad_norm(self) -> float:
        """The 2-norm of all gradients in fp32 (a missing gradient counts as 0): each chunk
        widened into the scratch buffer and dotted with itself while it is in cache (asking
        torch for an fp32 norm of a bf16 tensor copies it whole first, twice as slow)."""
        squares = torch.zeros((), dtype=torch.float64, device=self._scratch.device)
        for group in self.param_groups:
            for chunk in self._chunks(group["params"]):
                flat = self._widened(chunk)
                squares += torch.dot(flat, flat).double()
        return float(squares.sqrt())

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        if closure is not None:
            raise ValueError("MasterWeightAdamW.step takes no closure")
        norm = self.grad_norm()
        self._global_grad_norm = norm
        self.overflow = not math.isfinite(norm)
        if self.overflow:
            return
        grad_scale = None
        if self.max_grad_norm > 0:
            clip = (norm + CLIP_EPS) / self.max_grad_norm
            if clip > 1:
                grad_scale = torch.tensor(clip, device=self._scratch.device)
        for group in self.param_groups:
            torch._foreach_add_([self.state[p]["step"] for p in group["params"]], 1.0)
            beta1, beta2 = group["betas"]
            for chunk in self._chunks(group["params"]):
                flat = self._widened(chunk)
                grads = [flat[offset : offset + (end - start)] for offset, _, start, end in chunk]
                masters, exp_avgs, exp_avg_sqs, steps = [], [], [], []
                for _, p, start, end in chunk:
                    state = self.state[p]
                    masters.append(state["master"].view(-1)[start:end])
                    exp_avgs.append(state["exp_avg"].view(-1)[start:end])
                    exp_avg_sqs.append(state["exp_avg_sq"].view(-1)[start:end])
                    steps.append(state["step"])
                # torch.optim.AdamW(fused=True)'s kernel, on our fp32 pieces directly.
                torch._fused_adamw_(
                    masters,
                    grads,
                    exp_avgs,
                    exp_avg_sqs,
                    [],
                    steps,
                    lr=float(group["lr"]),
                    beta1=beta1,
                    beta2=beta2,
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    amsgrad=False,
                    maximize=False,
                    grad_scale=grad_scale,
                    found_inf=None,
                )
                weights = [p.data.view(-1)[start:end] for _, p, start, end in chunk]
                torch._foreach_copy_(weights, masters)

    def _chunks(self, params: list[Tensor]) -> Iterator[list[Piece]]:
        """The parameters' elements in order, cut into chunks of at most `CHUNK_ELEMENTS`: each
        a list of (offset in the chunk, parameter, start, end) pieces, a parameter larger than
        a chunk spread over several. Small enough that a chunk's gradient, master and moments
        stay in cache from widening through the update to the bf16 copy back."""
        chunk: list[Piece] = []
        filled = 0
        for p in params:
            start, total = 0, p.numel()
            while start < total:
                end = min(total, start + CHUNK_ELEMENTS - filled)
                chunk.append((filled, p, start, end))
                filled += end - start
                start = end
                if filled == CHUNK_ELEMENTS:
                    yield chunk
                    chunk, filled = [], 0
        if chunk:
            yield chunk

    def _widened(self, chunk: list[Piece]) -> Tensor:
        """The chunk's gradients in fp32, in the scratch buffer, as one flat tensor (zeros for
        a parameter without one, as DeepSpeed's wrapper gives it)."""
        size = chunk[-1][0] + chunk[-1][3] - chunk[-1][2]
        flat = self._scratch[:size]
        targets, sources = [], []
        for offset, p, start, end in chunk:
            target = flat[offset : offset + (end - start)]
            if p.grad is None:
                target.zero_()
            else:
                targets.append(target)
                sources.append(p.grad.reshape(-1)[start:end])  # a view unless strided
        if targets:
            torch._foreach_copy_(targets, sources)
        return flat

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Ours, or DeepSpeed's `FP16_UnfusedOptimizer` one (its torch AdamW's state over the
        fp32 copies it kept in `fp32_groups`). Copied into the existing fp32 tensors: torch's
        own loader would cast the masters and moments to the parameters' bf16."""
        if "fp32_groups" in state_dict:
            inner = state_dict["optimizer_state_dict"]
            masters = [t for group in state_dict["fp32_groups"] for t in group]
            saved_state = {
                index: {**inner["state"].get(index, {}), "master": masters[index]}
                for index in range(len(masters))
            }
            groups = inner["param_groups"]
        else:
            saved_state, groups = state_dict["state"], state_dict["param_groups"]
        params = list(self._params())
        saved_count = sum(len(g["params"]) for g in groups)
        if saved_count != len(params) or len(groups) != len(self.param_groups):
            raise ValueError(
                f"optimizer checkpoint has {saved_count} parameters in {len(groups)} groups; "
                f"this model trains {len(params)} in {len(self.param_groups)}"
            )
        for group, saved in zip(self.param_groups, groups, strict=True):
            # Our hyper-parameters and the schedule's `initial_lr`; not the flags of DeepSpeed's
            # inner torch AdamW (fused, foreach, ...), which mean nothing here.
            group.update({k: v for k, v in saved.items() if k in group and k != "params"})
        for index, p in enumerate(params):
            saved_p = saved_state.get(index, {})
            state = self.state[p]
            for key in STATE_KEYS:
                if key in saved_p:
                    state[key].copy_(saved_p[key])
            if "step" in saved_p:
                state["step"].fill_(float(saved_p["step"]))
            p.data.copy_(state["master"])


def cast_parameters(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Floating-point parameters to `dtype` in place (the same objects, so an optimizer built
    on them keeps them); buffers such as rotary frequencies keep theirs."""
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
