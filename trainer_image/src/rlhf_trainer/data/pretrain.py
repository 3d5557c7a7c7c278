"""PPO-ptx's pretraining text (`data.pretrain`, column `data.pretrainKey`) and the batches the
actor models beside its policy loss (InstructGPT, Ouyang et al. 2022).

Step `s` reads the stream positions `(s - 1) x rows .. s x rows - 1`: a pure function of the
step, so a resumed run trains on exactly the batches it would have, with nothing to store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rlhf_trainer.config import DataConfig

from .dataset import OrderedDataset
from .prompts import column
from .sources import DataLoadError, mixed_rows


def load_pretrain(
    cfg: DataConfig, tokenizer: Any, base_dir: Path, seed: int
) -> OrderedDataset[list[int]]:
    """Each text as token ids (the tokenizer's special tokens, eos last), cut to `maxLength`."""
    if not cfg.pretrain:
        raise DataLoadError("data.pretrain has no sources")
    texts = []
    for source, row in mixed_rows(cfg.pretrain, cfg, base_dir, seed, "text"):
        value = column(row, cfg.pretrain_key, source)
        if not isinstance(value, str):
            raise DataLoadError(
                f"column {cfg.pretrain_key!r} (data.pretrainKey) must be text; got "
                f"{type(value).__name__}"
            )
        texts.append(value)
    items = []
    for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]:
        ids = list(ids)
        if tokenizer.eos_token_id is not None and (not ids or ids[-1] != tokenizer.eos_token_id):
            ids.append(tokenizer.eos_token_id)
        if len(ids) >= 2:  # one token predicts nothing
            items.append(ids[: cfg.max_length])
    if not items:
        raise DataLoadError("data.pretrain holds no text of two tokens or more")
    return OrderedDataset(items, seed=seed, shuffle=cfg.shuffle)


@dataclass(frozen=True)
class PretrainBatches:
    """`rows` pretraining sequences per step, right-padded: `input_ids`, `attention_mask`."""

    dataset: OrderedDataset[list[int]]
    rows: int
    pad_id: int

    def batch(self, step: int) -> dict[str, Tensor]:
        start = (step - 1) * self.rows
        sequences = [self.dataset.at(p) for p in range(start, start + self.rows)]
        return pad_right(sequences, self.pad_id)


def pad_right(sequences: list[list[int]], pad_id: int) -> dict[str, Tensor]:
    length = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def lm_loss(model: Any, batch: dict[str, Tensor]) -> Tensor:
    """Mean next-token negative log-likelihood over the real tokens of a right-padded batch
    (all-padding columns are dropped first)."""
    from rlhf_trainer.algos.losses import sft_loss

    mask = batch["attention_mask"]
    used = mask.any(dim=0).nonzero()
    length = int(used[-1]) + 1 if len(used) else 1
    ids, mask = batch["input_ids"][:, :length], mask[:, :length]
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    return sft_loss(logits[:, :-1], ids[:, 1:], mask[:, 1:])
