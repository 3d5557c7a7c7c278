"""Samples -> padded tensors in the layout every offline rank reads (pure).

A step batch holds `B` samples of `K` sequences each (see `kinds.ROWS`), right-padded to the
longest sequence of the step:

- `input_ids`, `attention_mask`, `loss_mask`: `[B, K, L]`; `loss_mask` is 1 on response tokens
  (the tokens that are trained or scored), 0 on the prompt and on padding.
- SFT, conditional SFT, distillation: `K = 1`, the prompt + response; distillation adds the
  teacher's log-probs `teacher_logps` `[B, 1, L, V]` (from the teacher ranks, per step).
- PRM: `K = 1`, the prompt + steps; `step_labels` `[B, 1, L]` is 1 / 0 at each step's
  separator token (good / bad step) and -1 elsewhere.
- Pairs (reward model, DPO/IPO/cDPO): `K = 2`, prompt + chosen at 0, prompt + rejected at 1.
- KTO: `K = 2`, prompt + response at 0; at 1 the same prompt with the *next* sample's response
  (sample i gets response (i + 1) mod B), the mismatched pair whose log-ratio estimates
  KL(policy || reference), KTO's reference point (Ethayarajh et al. 2024); plus `desirable`
  `[B]` (bool).

Right padding keeps positions 0..n-1 for real tokens, so the default position ids are right.
Rows are samples, so `split_rows` shards a step over ranks without separating a pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from rlhf_trainer.algos.prm import NO_STEP

from .kinds import OfflineSpec, TrainerKind

if TYPE_CHECKING:
    from rlhf_trainer.data.offline import KTOItem, PreferenceItem, PRMItem, SFTItem

SEQUENCE_KEYS = ("input_ids", "attention_mask", "loss_mask", "step_labels")
# `[B, K, L, V]` per-position distributions (distillation's teacher log-probs).
DISTRIBUTION_KEYS = ("teacher_logps",)
# A sequence is (prompt ids, response ids).
Sequence_ = tuple[list[int], list[int]]


def sample_sequences(
    items: Sequence[Any], spec: OfflineSpec, max_length: int
) -> list[list[Sequence_]]:
    """The `K` (prompt, response) sequences of each sample."""
    if spec.kind in (TrainerKind.SFT, TrainerKind.DISTILLATION, TrainerKind.PRM):
        sft: Sequence[SFTItem] = items
        return [[(it.prompt_ids, it.response_ids)] for it in sft]
    if spec.kind is TrainerKind.KTO:
        return kto_sequences(items, max_length)
    pairs: Sequence[PreferenceItem] = items
    return [[(it.prompt_ids, it.chosen_ids), (it.prompt_ids, it.rejected_ids)] for it in pairs]


def kto_sequences(items: Sequence[KTOItem], max_length: int) -> list[list[Sequence_]]:
    """Each example and its KL completion: its prompt with the next example's response.

    The borrowed response is cut so that the pair still fits `max_length`. With a single
    sample the "mismatch" is the sample itself (KL estimate 0): use batches of 2 or more.
    """
    out = []
    for i, item in enumerate(items):
        other = items[(i + 1) % len(items)]
        room = max(1, max_length - len(item.prompt_ids))
        out.append(
            [(item.prompt_ids, item.response_ids), (item.prompt_ids, other.response_ids[:room])]
        )
    return out


def pad_sequences(samples: list[list[Sequence_]], pad_id: int) -> dict[str, Tensor]:
    """`[B, K, L]` ids, attention mask and loss mask, right-padded with `pad_id`."""
    if not samples or not samples[0]:
        raise ValueError("collate needs at least one sample with at least one sequence")
    rows = len(samples[0])
    if any(len(s) != rows for s in samples):
        raise ValueError("every sample must have the same number of sequences")
    length = max(len(p) + len(r) for s in samples for p, r in s)
    shape = (len(samples), rows, length)
    ids = torch.full(shape, pad_id, dtype=torch.long)
    attention = torch.zeros(shape, dtype=torch.long)
    loss = torch.zeros(shape, dtype=torch.long)
    for b, sample in enumerate(samples):
        for k, (prompt, response) in enumerate(sample):
            n = len(prompt) + len(response)
            ids[b, k, :n] = torch.tensor(prompt + response, dtype=torch.long)
            attention[b, k, :n] = 1
            loss[b, k, len(prompt) : n] = 1
    return {"input_ids": ids, "attention_mask": attention, "loss_mask": loss}


def collate(
    items: Sequence[Any], spec: OfflineSpec, pad_id: int, max_length: int
) -> dict[str, Tensor]:
    """One step's samples as tensors (see the module docstring for the layout)."""
    batch = pad_sequences(sample_sequences(items, spec, max_length), pad_id)
    if spec.kind is TrainerKind.PRM:
        batch["step_labels"] = step_labels(items, batch["input_ids"].shape)
    if spec.kind is TrainerKind.KTO:
        batch["desirable"] = torch.tensor([bool(it.desirable) for it in items], dtype=torch.bool)
    return batch


def step_labels(items: Sequence[PRMItem], shape: torch.Size) -> Tensor:
    """`[B, 1, L]` PRM labels: 1 / 0 at each step's separator token (good / bad), -1 elsewhere."""
    labels = torch.full(shape, NO_STEP, dtype=torch.long)
    for b, item in enumerate(items):
        for position, good in zip(item.positions, item.labels, strict=True):
            labels[b, 0, len(item.prompt_ids) + position] = int(good)
    return labels


def trim_right(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Drop the padding columns no row of this (micro-)batch uses."""
    mask = batch["attention_mask"]
    used = mask.reshape(-1, mask.shape[-1]).any(dim=0).nonzero()
    length = int(used[-1]) + 1 if len(used) else 1
    out = {k: v[..., :length] if k in SEQUENCE_KEYS else v for k, v in batch.items()}
    for key in DISTRIBUTION_KEYS:
        if key in out:
            out[key] = out[key][..., :length, :]
    return out


def response_tokens(batch: dict[str, Tensor]) -> int:
    """Response tokens of the batch (trained on by SFT; scored by the others)."""
    return int(batch["loss_mask"].sum())
