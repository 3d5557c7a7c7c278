"""KL estimators (Schulman's k1/k2/k3) and the fixed/adaptive KL controllers."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf_trainer.algos.kl import AdaptiveKLController, FixedKLController, kl_estimate

# logp = log 0.5, ref_logp = log 0.25: log-ratio log 2.
LOG2 = math.log(2.0)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        pytest.param("k1", LOG2, id="k1-log-ratio"),
        pytest.param("k2", 0.5 * LOG2**2, id="k2-half-squared"),
        pytest.param("k3", 0.5 + LOG2 - 1.0, id="k3-ratio-minus-1-minus-log"),
    ],
)
def test_hand_worked(kind: str, expected: float) -> None:
    logp = torch.tensor([[math.log(0.5)]], dtype=torch.float64)
    ref_logp = torch.tensor([[math.log(0.25)]], dtype=torch.float64)
    assert kl_estimate(logp, ref_logp, kind).item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_matches_the_issue_formulas(kind: str) -> None:
    generator = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=generator, dtype=torch.float64) * 4
    ref_logp = -torch.rand(3, 5, generator=generator, dtype=torch.float64) * 4
    formulas = {
        "k1": logp - ref_logp,
        "k2": 0.5 * (logp - ref_logp) ** 2,
        "k3": torch.exp(ref_logp - logp) - (ref_logp - logp) - 1,
    }
    torch.testing.assert_close(kl_estimate(logp, ref_logp, kind), formulas[kind])


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_unbiased_estimators_average_to_the_exact_kl(kind: str) -> None:
    """E_{x~p}[k(x)] = KL(p || q) exactly for k1 and k3, computed as a sum over categories."""
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    q = torch.tensor([0.25, 0.25, 0.4, 0.1], dtype=torch.float64)
    exact = (p * (p / q).log()).sum()
    expectation = (p * kl_estimate(p.log(), q.log(), kind)).sum()
    torch.testing.assert_close(expectation, exact)


def test_k2_is_close_to_kl_for_nearby_distributions() -> None:
    """k2 is biased, but its bias is third order in the log-ratio."""
    p = torch.tensor([0.24, 0.26, 0.25, 0.25], dtype=torch.float64)
    q = torch.full((4,), 0.25, dtype=torch.float64)
    exact = (p * (p / q).log()).sum()
    expectation = (p * kl_estimate(p.log(), q.log(), "k2")).sum()
    assert expectation.item() == pytest.approx(exact.item(), rel=0.05)


@settings(max_examples=60, deadline=None)
@given(st.floats(-30, 30), st.floats(-30, 30))
def test_k2_and_k3_are_non_negative(logp: float, ref_logp: float) -> None:
    a, b = torch.tensor([logp], dtype=torch.float64), torch.tensor([ref_logp], dtype=torch.float64)
    assert kl_estimate(a, b, "k2").item() >= 0
    assert kl_estimate(a, b, "k3").item() >= 0


def test_clamp_bounds_the_log_ratio() -> None:
    logp = torch.tensor([-40.0, -1.0, 0.0])
    ref_logp = torch.tensor([0.0, -1.0, -40.0])
    k1 = kl_estimate(logp, ref_logp, "k1", clamp=10.0)
    torch.testing.assert_close(k1, torch.tensor([-10.0, 0.0, 10.0]))
    k3 = kl_estimate(logp, ref_logp, "k3", clamp=10.0)
    assert torch.isfinite(k3).all()
    assert k3[0].item() == pytest.approx(math.exp(10) - 11, rel=1e-6)
    assert torch.isinf(kl_estimate(logp * 3, ref_logp, "k3")[0])  # unclamped it overflows


def test_mask_zeroes_padding_even_when_log_probs_are_infinite() -> None:
    logp = torch.tensor([[-1.0, -math.inf]], requires_grad=True)
    ref_logp = torch.tensor([[-2.0, 0.0]])
    result = kl_estimate(logp, ref_logp, "k3", mask=torch.tensor([[1, 0]]))
    assert result[0, 1] == 0
    result.sum().backward()
    assert logp.grad is not None and torch.isfinite(logp.grad).all()


@pytest.mark.parametrize(
    ("kind", "gradient"),
    [
        # d/dlogp of each estimator with lr = logp - ref_logp.
        pytest.param("k1", lambda lr: torch.ones_like(lr), id="k1"),
        pytest.param("k2", lambda lr: lr, id="k2"),
        pytest.param("k3", lambda lr: 1 - torch.exp(-lr), id="k3"),
    ],
)
def test_gradient_reaches_logp_and_never_ref_logp(
    kind: str, gradient: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    logp = torch.tensor([-0.5, -2.0, -1.0], dtype=torch.float64, requires_grad=True)
    ref_logp = torch.tensor([-1.0, -1.0, -1.0], dtype=torch.float64, requires_grad=True)
    kl_estimate(logp, ref_logp, kind).sum().backward()
    assert ref_logp.grad is None
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, gradient(logp.detach() - ref_logp.detach()))


def test_inputs_are_not_modified() -> None:
    logp, ref_logp = torch.tensor([-40.0, -1.0]), torch.tensor([0.0, -2.0])
    kl_estimate(logp, ref_logp, "k3", clamp=10.0, mask=torch.tensor([1, 1]))
    assert logp.tolist() == [-40.0, -1.0] and ref_logp.tolist() == [0.0, -2.0]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(
            lambda: kl_estimate(torch.zeros(2), torch.zeros(2), "k4"),
            "kind must be one of 'k1', 'k2', 'k3'",
            id="unknown-kind",
        ),
        pytest.param(
            lambda: kl_estimate(torch.zeros(2), torch.zeros(3), "k1"),
            "ref_logp must have the same shape",
            id="shape",
        ),
        pytest.param(
            lambda: kl_estimate(torch.zeros(2), torch.zeros(2), "k3", clamp=0.0),
            r"clamp must be in \(0, inf\)",
            id="zero-clamp",
        ),
        pytest.param(
            lambda: kl_estimate(torch.zeros(2), torch.zeros(2), "k3", mask=torch.ones(3)),
            "mask must have the shape",
            id="mask-shape",
        ),
        pytest.param(
            lambda: FixedKLController(-0.1),
            r"kl_coef must be in \[0, inf\)",
            id="negative-fixed-coef",
        ),
        pytest.param(
            lambda: AdaptiveKLController(0.1, 0.0, 10000),
            r"target must be in \(0, inf\)",
            id="zero-target",
        ),
        pytest.param(
            lambda: AdaptiveKLController(0.1, 6.0, 0),
            r"horizon must be in \(0, inf\)",
            id="zero-horizon",
        ),
    ],
)
def test_errors_name_the_argument(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_fixed_controller_never_moves() -> None:
    controller = FixedKLController(0.05)
    controller.update(current_kl=100.0, n_steps=1000)
    assert controller.value == 0.05


@pytest.mark.parametrize(
    ("current_kl", "expected"),
    [
        # init 0.1, target 6, horizon 10000, n_steps 1000: value *= 1 + e * 0.1.
        pytest.param(6.0, 0.1, id="on-target"),
        pytest.param(6.6, 0.1 * (1 + 0.1 * 0.1), id="10pct-above"),
        pytest.param(12.0, 0.1 * (1 + 0.2 * 0.1), id="far-above-clipped-to-20pct"),
        pytest.param(3.0, 0.1 * (1 - 0.2 * 0.1), id="far-below-clipped-to-20pct"),
        pytest.param(0.0, 0.1 * (1 - 0.2 * 0.1), id="zero-kl"),
    ],
)
def test_adaptive_controller_follows_ziegler_update(current_kl: float, expected: float) -> None:
    controller = AdaptiveKLController(init=0.1, target=6.0, horizon=10000)
    controller.update(current_kl=current_kl, n_steps=1000)
    assert controller.value == pytest.approx(expected, rel=1e-12)


def test_adaptive_controller_compounds_over_steps() -> None:
    controller = AdaptiveKLController(init=0.2, target=1.0, horizon=100)
    for _ in range(10):
        controller.update(current_kl=2.0, n_steps=10)
    assert controller.value == pytest.approx(0.2 * 1.02**10, rel=1e-12)
