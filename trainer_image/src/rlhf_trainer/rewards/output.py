"""What reward sources return, checked and turned into tensors; and how parts are combined.

Reward functions (OpenRLHF's convention) may return a tensor or a list of numbers, one per query,
or a dict with `rewards` (required), `scores` (what is logged as the task score; default: the
rewards) and `extra_logs` (name -> one number, or one per query; logged as means).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


class RewardOutputError(ValueError):
    """A reward source returned something that is not one finite number per query."""


@dataclass(frozen=True)
class RewardResult:
    rewards: Tensor  # [B] float32: what the RL objective uses
    scores: Tensor  # [B] float32: the task score for logs (defaults to the rewards)
    extra_logs: dict[str, float] = field(default_factory=dict)


def to_numbers(value: Any, what: str, batch_size: int, source: str) -> list[float]:
    """One finite float per query from a tensor, array or sequence (anything with `tolist`)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, int | float) and batch_size == 1:
        value = [value]
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise RewardOutputError(
            f"{source}: {what} must be a list or tensor of {batch_size} numbers; "
            f"got {type(value).__name__}"
        )
    if len(value) != batch_size:
        raise RewardOutputError(
            f"{source}: {what} has {len(value)} values for {batch_size} queries; "
            "return exactly one per query"
        )
    numbers = []
    for i, v in enumerate(value):
        if isinstance(v, Sequence) and len(v) == 1:  # a [B, 1] tensor's rows
            v = v[0]
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise RewardOutputError(f"{source}: {what}[{i}] is {type(v).__name__}, not a number")
        if not math.isfinite(v):
            raise RewardOutputError(f"{source}: {what}[{i}] is {v} (rewards must be finite)")
        numbers.append(float(v))
    return numbers


def parse_reward_output(value: Any, batch_size: int, source: str) -> RewardResult:
    """Check a reward source's return value and make it a `RewardResult`."""
    if isinstance(value, Mapping):
        if "rewards" not in value:
            raise RewardOutputError(
                f"{source}: a dict result needs a 'rewards' entry (got keys: "
                f"{', '.join(map(str, value)) or 'none'})"
            )
        rewards = to_numbers(value["rewards"], "rewards", batch_size, source)
        scores = rewards
        if value.get("scores") is not None:
            scores = to_numbers(value["scores"], "scores", batch_size, source)
        extra = _extra_logs(value.get("extra_logs") or {}, batch_size, source)
    else:
        rewards = scores = to_numbers(value, "rewards", batch_size, source)
        extra = {}
    return RewardResult(
        torch.tensor(rewards, dtype=torch.float32), torch.tensor(scores, dtype=torch.float32), extra
    )


def _extra_logs(logs: Any, batch_size: int, source: str) -> dict[str, float]:
    if not isinstance(logs, Mapping):
        raise RewardOutputError(f"{source}: extra_logs must be a dict of name -> number(s)")
    out = {}
    for name, v in logs.items():
        if hasattr(v, "tolist"):
            v = v.tolist()
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[str(name)] = float(v)
        else:
            values = to_numbers(v, f"extra_logs[{name!r}]", batch_size, source)
            out[str(name)] = sum(values) / len(values)
    return out


def combine_rewards(parts: Sequence[tuple[float, Tensor]]) -> Tensor:
    """`sum_i w_i * r_i` over the reward sources (each `[B]`), as float32."""
    if not parts:
        raise ValueError("combine_rewards needs at least one (weight, rewards) part")
    shape = parts[0][1].shape
    total = torch.zeros(shape, dtype=torch.float32)
    for weight, rewards in parts:
        if rewards.shape != shape:
            raise ValueError(
                f"reward parts must have the same shape; got {tuple(shape)} and "
                f"{tuple(rewards.shape)}"
            )
        total = total + weight * rewards.detach().float().cpu()
    return total


def to_score_range(scores: Tensor, score_range: Sequence[float] | None) -> Tensor:
    """A reward model's raw scores mapped into `[low, high]` by a sigmoid (its Bradley-Terry
    reading: the probability the response is preferred, scaled), for a reward model that
    stands in for an OpenAI score_model grader with its `range`; unchanged without one."""
    if score_range is None:
        return scores
    low, high = float(score_range[0]), float(score_range[1])
    return low + (high - low) * torch.sigmoid(scores.float())
