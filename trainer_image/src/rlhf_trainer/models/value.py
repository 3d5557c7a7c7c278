"""Value models: the critic (a value per token) and reward models (a score per sequence).

One design serves both, the one OpenRLHF uses: a transformer backbone plus a linear scalar head.
Concretely it is the Hugging Face `*ForSequenceClassification` model with one label, whose
backbone is `model.base_model` and whose head is `model.score`. So

- a reward model saved by HF (or by our reward-model trainer, or `build_tiny_model(kind=
  "reward")`) loads with its trained head;
- a critic initialised from a reward model is the same load: backbone and head both come from
  the reward model, as in the PPO papers;
- a critic initialised from a causal LM loads the backbone and gets a fresh head (seeded);
- the critic exports with `save_pretrained` as an ordinary HF sequence-classification model.

`ValueModel.forward` returns per-token values `[B, T]`; `score_with_model` reads the value at
the last real token of each row, the reward model's sequence score.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel


class ValueModel(nn.Module):
    """An HF sequence-classification model (backbone + `score` head) read out per token.

    Forwarding through this module (rather than calling HF's pooled forward) is what lets the
    critic train on every response token and lets a DeepSpeed engine wrap it like any module.
    """

    def __init__(self, hf_model: PreTrainedModel) -> None:
        super().__init__()
        head = getattr(hf_model, "score", None)
        if not isinstance(head, nn.Linear) or head.out_features != 1:
            raise ValueError(
                f"{type(hf_model).__name__} has no scalar `score` head (nn.Linear with one "
                "output); value models need a decoder sequence-classification model with "
                "num_labels=1 (e.g. LlamaForSequenceClassification)"
            )
        self.hf = hf_model

    @property
    def config(self) -> Any:
        return self.hf.config

    @property
    def head(self) -> nn.Linear:
        head = self.hf.score
        if not isinstance(head, nn.Linear):  # checked in __init__; keeps the type precise
            raise TypeError("score head is not nn.Linear")
        return head

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """Per-token values `[B, T]` (float32) for every position of `input_ids`; without a
        mask, `position_ids` say where sequences start (packed rows, see `models.packing`)."""
        if position_ids is None and attention_mask is not None:
            position_ids = position_ids_from_mask(attention_mask)
        hidden = self.hf.base_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        ).last_hidden_state
        values: Tensor = self.head(hidden).squeeze(-1).float()
        return values

    def save_pretrained(self, out_dir: str | Path, **kwargs: Any) -> None:
        """HF-format export (a sequence-classification model that `from_pretrained` reloads)."""
        self.hf.save_pretrained(out_dir, **kwargs)

    def gradient_checkpointing_enable(self, **kwargs: Any) -> None:
        self.hf.gradient_checkpointing_enable(**kwargs)


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Positions that count real tokens only (0 on left padding), as HF generation and vLLM
    number them, so a token's output does not depend on how much padding precedes it."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def last_real_token_index(attention_mask: Tensor) -> Tensor:
    """`[B]` index of the last non-zero mask position of each row (0 for an all-zero row)."""
    if attention_mask.ndim != 2:
        raise ValueError(f"attention_mask must be [B, T]; got shape {tuple(attention_mask.shape)}")
    real = attention_mask != 0
    positions = torch.arange(real.shape[1], device=real.device).expand_as(real)
    return torch.where(real, positions, torch.zeros_like(positions)).amax(dim=1)


def gather_last_real(values: Tensor, attention_mask: Tensor) -> Tensor:
    """`[B]`: each row's value at its last real token (works with left and right padding)."""
    if values.shape != attention_mask.shape:
        raise ValueError(
            f"values {tuple(values.shape)} and attention_mask {tuple(attention_mask.shape)} "
            "must have the same [B, T] shape"
        )
    index = last_real_token_index(attention_mask)
    return values.gather(1, index.unsqueeze(1)).squeeze(1)


@torch.no_grad()
def score_with_model(model: ValueModel, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Sequence scores `[B]` of a reward model: the value at the last real token of each row."""
    return gather_last_real(model(input_ids, attention_mask), attention_mask)


def init_value_head(head: nn.Linear, seed: int = 0) -> None:
    """Fresh head for a critic built from a causal LM: N(0, 1/(hidden+1)), zero bias, seeded."""
    if head.weight.numel() == 0:
        raise RuntimeError(
            "the value head's weight is partitioned (DeepSpeed ZeRO-3 zero.Init); load the "
            "value model before deepspeed.initialize, which partitions it afterwards"
        )
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        std = 1.0 / (head.in_features + 1)
        weight = torch.randn(head.weight.shape, generator=generator) * std
        head.weight.copy_(weight.to(head.weight.dtype))
        if head.bias is not None:
            head.bias.zero_()
