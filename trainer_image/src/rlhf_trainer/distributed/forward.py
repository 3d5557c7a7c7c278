"""Forward passes over the experience layout shared by every role.

A batch row is `[left padding | prompt | response | right padding]`: `input_ids` and
`attention_mask` are `[B, L]`, and the response is the last `R` columns, described by
`action_mask` `[B, R]` (1 for tokens the policy generated, 0 for padding and, in multi-turn
rollouts, for environment feedback inside the response). Position ids count real tokens only,
as vLLM and HF generation do, so left padding does not change any value. With `packed` the
model sees the real tokens only, as one row (`rlhf_trainer.models.packing`); the outputs come
back in this layout, so the losses read them alike.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rlhf_trainer.algos.losses import log_probs_and_entropy, log_probs_from_logits
from rlhf_trainer.models.packing import causal_lm_logits, token_values

# `[B, L]` tensors over the whole sequence; every other 2-D tensor is `[B, R]` per action.
SEQUENCE_KEYS = frozenset({"input_ids", "attention_mask"})


def trim_padding(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Drop all-padding columns: leading ones of the sequence, trailing ones of the response.

    Per-token `[B, R]` tensors are trimmed with the response; the response stays the last
    columns of the sequence, so every consumer slices it the same way.
    """
    mask, actions = batch["attention_mask"], batch["action_mask"]
    length, response = mask.shape[1], actions.shape[1]
    real_columns = mask.any(dim=0).nonzero()
    first = int(real_columns[0]) if len(real_columns) else 0
    used = (mask[:, length - response :] != 0).any(dim=0).nonzero()
    keep_response = int(used[-1]) + 1 if len(used) else 1
    drop_right = response - keep_response
    first = min(first, length - response)  # never cut into the response
    out: dict[str, Tensor] = {}
    for key, value in batch.items():
        if key in SEQUENCE_KEYS:
            out[key] = value[:, first : length - drop_right]
        elif value.dim() == 2:
            out[key] = value[:, :keep_response]
        else:
            out[key] = value
    return out


def response_logits(
    model: nn.Module, batch: dict[str, Tensor], temperature: float, *, packed: bool = False
) -> Tensor:
    """Logits `[B, R, V]` that score each response token (the position before it)."""
    response = batch["action_mask"].shape[1]
    logits = causal_lm_logits(
        model,
        batch["input_ids"],
        batch["attention_mask"],
        packed=packed,
        columns=slice(-response - 1, -1),
    )
    # Sampling divided the logits by the temperature; score the same distribution.
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return logits


def action_log_probs(
    model: nn.Module,
    batch: dict[str, Tensor],
    temperature: float,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    packed: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs `[B, R]` of the response tokens, and their entropy when asked (with a
    gradient only for an entropy bonus; as a statistic it is computed on detached logits)."""
    response = batch["action_mask"].shape[1]
    logits = response_logits(model, batch, temperature, packed=packed)
    labels = batch["input_ids"][:, -response:]
    if with_entropy:
        return log_probs_and_entropy(
            logits, labels, batch["action_mask"], entropy_grad=entropy_grad
        )
    return log_probs_from_logits(logits, labels), None


def action_values(model: nn.Module, batch: dict[str, Tensor], *, packed: bool = False) -> Tensor:
    """Critic values `[B, R]`: V of the state before each response token."""
    response = batch["action_mask"].shape[1]
    values = token_values(model, batch["input_ids"], batch["attention_mask"], packed=packed)
    return values[:, -response - 1 : -1]


def in_chunks(batch: dict[str, Tensor], size: int) -> list[dict[str, Tensor]]:
    rows = next(iter(batch.values())).shape[0]
    return [{k: v[i : i + size] for k, v in batch.items()} for i in range(0, rows, size)]


@torch.no_grad()
def chunked(fn: object, batch: dict[str, Tensor], size: int) -> Tensor:
    """Apply `fn(micro_batch) -> [b, R]` over micro-batches, re-padding to the full width."""
    width = batch["action_mask"].shape[1]
    parts = []
    for micro in in_chunks(batch, size):
        part = fn(trim_padding(micro))  # type: ignore[operator]
        parts.append(torch.nn.functional.pad(part.float(), (0, width - part.shape[1])))
    return torch.cat(parts)
