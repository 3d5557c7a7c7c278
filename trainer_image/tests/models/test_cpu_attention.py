"""`attnImplementation: auto` on CPUs (`models.attention`): eager for short rows, sdpa for long
ones, with the values and gradients of either kernel alone, padded and packed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlhf_trainer.distributed.forward import action_log_probs
from rlhf_trainer.models import attention
from rlhf_trainer.models.attention import CPU_AUTO, use_eager
from rlhf_trainer.models.loading import LoadOptions, load_causal_lm


@pytest.mark.parametrize(
    ("rows", "heads", "length", "dtype", "eager"),
    [
        (32, 12, 94, torch.bfloat16, True),  # the benchmark's size L batch
        (1, 1, 4096, torch.bfloat16, True),  # 16 Mi scores: the bound itself
        (1, 1, 4097, torch.bfloat16, False),
        (8, 16, 1024, torch.float16, False),
        (32, 12, 94, torch.float32, False),  # fp32 keeps sdpa
    ],
)
def test_eager_for_short_half_precision_rows(
    rows: int, heads: int, length: int, dtype: torch.dtype, eager: bool
) -> None:
    assert use_eager(rows, heads, length, length, dtype) is eager


def batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 200, (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    mask[1, 7:] = 0  # right padding inside the response
    actions = mask[:, -4:].clone()
    return {"input_ids": ids, "attention_mask": mask, "action_mask": actions}


def log_probs_and_grads(
    model_dir: Path, kernel: str, packed: bool, dtype: torch.dtype
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model = load_causal_lm(model_dir, torch.float32, LoadOptions(attn_implementation=kernel))
    model = model.to(dtype)
    data = batch()
    logp, _ = action_log_probs(model, data, 1.0, packed=packed)
    (logp * data["action_mask"]).sum().backward()
    grads = [p.grad.float() for p in model.parameters() if p.grad is not None]
    return torch.where(data["action_mask"] != 0, logp, 0.0).detach(), grads


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize(
    ("branch", "dtype", "reference"),
    [
        ("short-rows", torch.bfloat16, "eager"),
        ("long-rows", torch.bfloat16, "sdpa"),
        ("fp32", torch.float32, "sdpa"),
    ],
)
def test_auto_gives_the_chosen_kernels_values_exactly(
    tiny_model_dir: Path,
    packed: bool,
    branch: str,
    dtype: torch.dtype,
    reference: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same values and gradients, bit for bit, as the kernel `auto` takes (with its mask)."""
    if branch == "long-rows":
        monkeypatch.setattr(attention, "EAGER_MAX_SCORES", 0)
    want, want_grads = log_probs_and_grads(tiny_model_dir, reference, packed, dtype)
    got, grads = log_probs_and_grads(tiny_model_dir, CPU_AUTO, packed, dtype)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    for g, w in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=0, rtol=0)
