"""Scoring rollouts with a process reward model (pure torch + the tokenizer): each response is
re-read as steps (split on the separator, encoded as the PRM's training data was, see
`rlhf_trainer.data.steps`), the PRM's good-step probability is read at every step's separator
token, and the step scores are aggregated into the response's reward (min, last or mean).

The rollout batch holds `[left padding | prompt | response | right padding]` rows whose last
`R` columns are the response (`loop.batch`); the PRM shares the actor's tokenizer, as every
reward model here does.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rlhf_trainer.algos.prm import aggregate_step_scores, step_margins
from rlhf_trainer.data.steps import StepIds, encode_steps, split_steps


def process_batch(
    input_ids: Tensor,
    attention_mask: Tensor,
    response_width: int,
    tokenizer: Any,
    ids: StepIds,
    separator: str,
) -> dict[str, Tensor]:
    """Right-padded `input_ids`, `attention_mask` and `step_mask` `[B, L]` of the rows'
    prompts followed by their responses re-encoded as steps."""
    prompt_width = input_ids.shape[1] - response_width
    rows: list[list[int]] = []
    positions: list[list[int]] = []
    for ids_row, mask_row in zip(input_ids, attention_mask.bool(), strict=True):
        prompt = ids_row[:prompt_width][mask_row[:prompt_width]].tolist()
        response = ids_row[prompt_width:][mask_row[prompt_width:]].tolist()
        text = str(tokenizer.decode(response, skip_special_tokens=True))
        steps, where = encode_steps(tokenizer, split_steps(text, separator), ids)
        rows.append(prompt + steps)
        positions.append([len(prompt) + p for p in where])
    length = max(1, max(len(r) for r in rows))
    pad = int(tokenizer.pad_token_id or 0)
    out_ids = torch.full((len(rows), length), pad, dtype=torch.long)
    out_mask = torch.zeros((len(rows), length), dtype=torch.long)
    steps_mask = torch.zeros((len(rows), length), dtype=torch.bool)
    for b, (row, where) in enumerate(zip(rows, positions, strict=True)):
        out_ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        out_mask[b, : len(row)] = 1
        steps_mask[b, where] = True
    return {"input_ids": out_ids, "attention_mask": out_mask, "step_mask": steps_mask}


def process_rewards(logits: Tensor, step_mask: Tensor, ids: StepIds, aggregation: str) -> Tensor:
    """`[B]` rewards: the aggregated `sigmoid(logit(positive) - logit(negative))` of the steps."""
    scores = torch.sigmoid(step_margins(logits, ids.positive, ids.negative))
    return aggregate_step_scores(scores, step_mask, aggregation)
