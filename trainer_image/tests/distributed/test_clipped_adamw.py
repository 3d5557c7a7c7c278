"""ClippedAdamW: torch's fused AdamW that clips and reports the norm (ZeRO-0 in fp32)."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf_trainer.distributed.clipped_adamw import ClippedAdamW


def nets() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    reference.load_state_dict(net.state_dict())
    return net, reference


@pytest.mark.parametrize("max_norm", [0.5, 1e6, 0.0], ids=["clipped", "under", "no-clip"])
def test_steps_like_torch_adamw_after_clip_grad_norm(max_norm: float) -> None:
    net, reference = nets()
    ours = ClippedAdamW(
        net.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.01, max_grad_norm=max_norm
    )
    theirs = torch.optim.AdamW(
        reference.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.01
    )
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        for model, optimizer in ((net, ours), (reference, theirs)):
            optimizer.zero_grad()
            (model(x).square().sum() * 10).backward()
        expected = torch.nn.utils.clip_grad_norm_(
            reference.parameters(), max_norm if max_norm > 0 else math.inf
        )
        ours.step()
        theirs.step()
        assert ours._global_grad_norm == pytest.approx(float(expected), rel=1e-6)
        assert not ours.overflow
    for a, b in zip(net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_a_non_finite_gradient_skips_the_step() -> None:
    net, _ = nets()
    optimizer = ClippedAdamW(
        net.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.0, max_grad_norm=1.0
    )
    before = [p.detach().clone() for p in net.parameters()]
    net(torch.full((2, 8), float("nan"))).sum().backward()
    optimizer.step()
    assert optimizer.overflow and math.isnan(optimizer._global_grad_norm or 0.0)
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    assert not optimizer.state  # no moments, no step counted
