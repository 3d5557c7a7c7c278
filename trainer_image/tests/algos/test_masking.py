"""Masked reductions: hand-worked values, padding anywhere, empty rows, NaN-safe padding."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhf_trainer.algos.masking import (
    last_token_mask,
    masked_count,
    masked_mean,
    masked_moments,
    masked_sum,
    masked_var,
    mean_var_from_moments,
)

X = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], dtype=torch.float64)
MIDDLE_AND_END = torch.tensor([[1, 0, 1, 0], [1, 1, 1, 1]])


@pytest.mark.parametrize(
    ("dim", "expected"),
    [
        pytest.param(None, (1 + 3 + 5 + 6 + 7 + 8) / 6, id="whole-batch"),
        pytest.param(-1, [2.0, 6.5], id="per-row"),
        pytest.param(0, [3.0, 6.0, 5.0, 8.0], id="per-column"),
    ],
)
def test_masked_mean_hand_values(dim: int | None, expected: float | list[float]) -> None:
    result = masked_mean(X, MIDDLE_AND_END, dim=dim)
    torch.testing.assert_close(result, torch.tensor(expected, dtype=torch.float64))


@pytest.mark.parametrize(
    "mask",
    [
        pytest.param(MIDDLE_AND_END, id="int"),
        pytest.param(MIDDLE_AND_END.bool(), id="bool"),
        pytest.param(MIDDLE_AND_END.double(), id="float"),
    ],
)
def test_mask_dtypes_agree(mask: torch.Tensor) -> None:
    assert masked_sum(X, mask).item() == 30.0
    assert masked_count(mask).item() == 6


def test_empty_row_reduces_to_zero_not_nan() -> None:
    mask = torch.tensor([[0, 0, 0, 0], [1, 0, 0, 0]])
    torch.testing.assert_close(masked_mean(X, mask, dim=-1), torch.tensor([0.0, 5.0]).double())
    torch.testing.assert_close(masked_var(X, mask, dim=-1), torch.zeros(2).double())
    assert masked_mean(X, torch.zeros_like(mask)).item() == 0.0


def test_non_finite_padding_reaches_neither_value_nor_gradient() -> None:
    x = torch.tensor([[1.0, -math.inf, 3.0], [math.nan, 2.0, 4.0]], requires_grad=True)
    mask = torch.tensor([[1, 0, 1], [0, 1, 1]])
    total = masked_mean(x, mask) + masked_var(x, mask) + masked_sum(x, mask)
    total.backward()
    assert torch.isfinite(total)
    assert x.grad is not None
    assert torch.isfinite(x.grad).all()
    assert x.grad[0, 1] == 0 and x.grad[1, 0] == 0


def test_masked_var_matches_torch_var_on_selected_values() -> None:
    real = X[MIDDLE_AND_END.bool()]
    torch.testing.assert_close(masked_var(X, MIDDLE_AND_END), real.var(unbiased=False))
    torch.testing.assert_close(
        masked_var(X, MIDDLE_AND_END, unbiased=True), real.var(unbiased=True)
    )


def test_moments_summed_over_shards_give_the_global_mean_and_var() -> None:
    """What an all-reduce of masked_moments does across data-parallel ranks."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=generator)
    mask = torch.rand(6, 5, generator=generator) > 0.3
    shards = [masked_moments(x[i : i + 2], mask[i : i + 2]) for i in range(0, 6, 2)]
    summed = [sum(parts) for parts in zip(*shards, strict=True)]
    mean, var = mean_var_from_moments(*summed, dtype=torch.float32)
    assert mean.dtype == torch.float32
    torch.testing.assert_close(mean, masked_mean(x, mask))
    torch.testing.assert_close(var, masked_var(x, mask))


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        pytest.param([1, 1, 1, 1], [0, 0, 0, 1], id="no-padding"),
        pytest.param([1, 1, 0, 0], [0, 1, 0, 0], id="padding-at-end"),
        pytest.param([1, 0, 1, 0], [0, 0, 1, 0], id="padding-in-middle-and-end"),
        pytest.param([0, 1, 0, 1], [0, 0, 0, 1], id="left-padding"),
        pytest.param([0, 0, 0, 0], [0, 0, 0, 0], id="empty-row"),
    ],
)
def test_last_token_mask(mask: list[int], expected: list[int]) -> None:
    result = last_token_mask(torch.tensor([mask]))
    assert result.dtype == torch.bool
    assert result.int().tolist() == [expected]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(
            lambda: masked_mean(X.long(), MIDDLE_AND_END), "x must be a floating", id="int-x"
        ),
        pytest.param(
            lambda: masked_mean(X, MIDDLE_AND_END[:, :3]),
            "mask must have the shape",
            id="mask-shape",
        ),
        pytest.param(
            lambda: masked_mean(X, [[1, 0]]), "mask must be a torch.Tensor", id="mask-list"
        ),
        pytest.param(
            lambda: last_token_mask(torch.ones(3)), "mask must have 2 dimensions", id="1d-mask"
        ),
    ],
)
def test_errors_name_the_argument(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(-100, 100), st.booleans()), min_size=1, max_size=30))
def test_masked_mean_and_var_equal_those_of_the_selected_values(
    pairs: list[tuple[float, bool]],
) -> None:
    values = torch.tensor([v for v, _ in pairs], dtype=torch.float64)
    mask = torch.tensor([m for _, m in pairs])
    selected = [v for v, m in pairs if m]
    expected_mean = sum(selected) / len(selected) if selected else 0.0
    expected_var = (
        sum((v - expected_mean) ** 2 for v in selected) / len(selected) if selected else 0.0
    )
    assert masked_mean(values, mask).item() == pytest.approx(expected_mean, abs=1e-9)
    assert masked_var(values, mask).item() == pytest.approx(expected_var, rel=1e-9, abs=1e-9)
