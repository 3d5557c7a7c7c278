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
    ("rows", "heads", "length", "eager"),
    [
        (32, 12, 94, True),  # the benchmark's size L batch
        (1, 1, 4096, True),  # 16 Mi scores: the bound itself
        (1, 1, 4097, False),
        (8, 16, 1024, False),
    ],
)
def test_eager_up_to_the_bound(rows: int, heads: int, length: int, eager: bool) -> None:
    q = torch.empty(rows, heads, length, 0)
    assert use_eager(q, q) is eager


def batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 200, (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    mask[1, 7:] = 0  # right padding inside the response
    actions = mask[:, -4:].clone()
    return {"input_ids": ids, "attention_mask": mask, "action_mask": actions}


def log_probs_and_grads(
    model_dir: Path, kernel: str, packed: bool
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model = load_causal_lm(model_dir, torch.float32, LoadOptions(attn_implementation=kernel))
    data = batch()
    logp, _ = action_log_probs(model, data, 1.0, packed=packed)
    (logp * data["action_mask"]).sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return torch.where(data["action_mask"] != 0, logp, 0.0).detach(), grads


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("branch", ["short-rows-eager", "long-rows-sdpa"])
def test_auto_gives_the_single_kernels_values(
    tiny_model_dir: Path, packed: bool, branch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if branch == "long-rows-sdpa":
        monkeypatch.setattr(attention, "EAGER_MAX_SCORES", 0)
    reference = "eager" if branch == "short-rows-eager" else "sdpa"
    want, want_grads = log_probs_and_grads(tiny_model_dir, reference, packed)
    got, grads = log_probs_and_grads(tiny_model_dir, CPU_AUTO, packed)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    for g, w in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-4)
