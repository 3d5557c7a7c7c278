"""Samples (token ids as generated) -> the padded tensors every role consumes (pure).

Layout of a row: `[left padding | prompt | response | right padding]`; the response is the
last `R` columns, and `action_mask` marks which response tokens the policy generated (0 for
padding and for environment feedback that a multi-turn agent inserted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


@dataclass
class Sample:
    """One rollout: the prompt's ids and the response's ids exactly as generated."""

    prompt_index: int
    prompt_ids: list[int]
    response_ids: list[int]
    action_mask: list[int]
    finish_reason: str
    prompt_text: str = ""
    label: Any = None
    response_text: str = ""
    # Set by a multi-turn agent that scores its own episodes; else the reward sources score.
    agent_reward: float | None = None
    turns: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    # The training row's fields (a grader's `item`); None where the prompt has no row.
    item: dict[str, Any] | None = None
    # The engine's sampling log-prob of each response token (0 where it did not generate
    # it): the behaviour policy's, kept by async rollout for the importance ratio.
    logprobs: list[float] | None = None
    # The weight versions that sampled its tokens, oldest first (vLLM's labels; partial
    # rollout): two or more when a weight update landed while it was being generated.
    weight_versions: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.action_mask) != len(self.response_ids):
            raise ValueError(
                f"action_mask has {len(self.action_mask)} entries for {len(self.response_ids)} "
                "response tokens; they must match"
            )
        if self.logprobs is not None and len(self.logprobs) != len(self.response_ids):
            raise ValueError(
                f"logprobs has {len(self.logprobs)} entries for {len(self.response_ids)} "
                "response tokens; they must match"
            )

    @property
    def generated_tokens(self) -> int:
        return sum(self.action_mask)


def to_batch(samples: list[Sample], pad_id: int) -> dict[str, Tensor]:
    """`input_ids`/`attention_mask` `[B, P+R]` and `action_mask` `[B, R]` for `samples`."""
    if not samples:
        raise ValueError("to_batch needs at least one sample")
    prompt_width = max(len(s.prompt_ids) for s in samples)
    response_width = max(1, max(len(s.response_ids) for s in samples))
    rows = len(samples)
    input_ids = torch.full((rows, prompt_width + response_width), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, prompt_width + response_width), dtype=torch.long)
    actions = torch.zeros((rows, response_width), dtype=torch.long)
    for row, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[row, prompt_width - p : prompt_width] = torch.tensor(s.prompt_ids)
        attention[row, prompt_width - p : prompt_width + r] = 1
        if r:
            input_ids[row, prompt_width : prompt_width + r] = torch.tensor(s.response_ids)
            actions[row, :r] = torch.tensor(s.action_mask)
    return {"input_ids": input_ids, "attention_mask": attention, "action_mask": actions}


def response_lengths(samples: list[Sample]) -> Tensor:
    return torch.tensor([len(s.response_ids) for s in samples], dtype=torch.float32)


def behaviour_log_probs(samples: list[Sample]) -> Tensor | None:
    """`[B, R]` sampling log-probs laid out as `to_batch`'s action mask (0 in padding), or
    None unless every sample has them."""
    if not samples or any(s.logprobs is None for s in samples):
        return None
    width = max(1, max(len(s.response_ids) for s in samples))
    out = torch.zeros((len(samples), width), dtype=torch.float32)
    for row, s in enumerate(samples):
        if s.logprobs:
            out[row, : len(s.logprobs)] = torch.tensor(s.logprobs, dtype=torch.float32)
    return out
