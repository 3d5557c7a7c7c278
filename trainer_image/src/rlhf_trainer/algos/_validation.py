"""Argument checks shared by the algos modules.

Only metadata is checked here (shapes, dtypes, Python numbers): checking tensor *values* would
force a device sync, which the hot path must not do. Every error names the argument, says what
was wrong and what is allowed.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor


def require_tensor(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def require_float_tensor(name: str, value: object) -> Tensor:
    tensor = require_tensor(name, value)
    if not tensor.is_floating_point():
        raise ValueError(
            f"{name} must be a floating-point tensor (float32 or float64), got {tensor.dtype}; "
            f"convert it with {name}.float()"
        )
    return tensor


def require_ndim(name: str, tensor: Tensor, ndim: int, layout: str) -> None:
    if tensor.dim() != ndim:
        raise ValueError(
            f"{name} must have {ndim} dimension{'s' if ndim != 1 else ''} {layout}, "
            f"got shape {tuple(tensor.shape)}"
        )


def require_same_shape(reference_name: str, reference: Tensor, **others: Tensor) -> None:
    for name, tensor in others.items():
        if tensor.shape != reference.shape:
            raise ValueError(
                f"{name} must have the same shape as {reference_name} "
                f"{tuple(reference.shape)}, got {tuple(tensor.shape)}"
            )


def require_mask(name: str, mask: object, shape: torch.Size) -> Tensor:
    """A mask is bool or numeric (non-zero = real token) and has exactly `shape`."""
    tensor = require_tensor(name, mask)
    if tensor.is_complex():
        raise ValueError(f"{name} must be a bool, integer or float tensor, got {tensor.dtype}")
    if tensor.shape != shape:
        raise ValueError(
            f"{name} must have the shape of the tensor it masks {tuple(shape)}, "
            f"got {tuple(tensor.shape)}"
        )
    return tensor


def require_choice(name: str, value: str, allowed: Iterable[str]) -> None:
    options = tuple(allowed)
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}; got {value!r}")


def require_number_in(
    name: str,
    value: float,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Check low <= value <= high (or < with *_open); None leaves that side unbounded."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a Python number, got {type(value).__name__}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high or value != value:  # value != value catches NaN
        left = "(" if low_open or low is None else "["
        right = ")" if high_open or high is None else "]"
        low_text = "-inf" if low is None else f"{low:g}"
        high_text = "inf" if high is None else f"{high:g}"
        raise ValueError(f"{name} must be in {left}{low_text}, {high_text}{right}, got {value!r}")
