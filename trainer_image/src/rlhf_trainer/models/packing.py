"""Forward passes over a padded batch, packed or not: the one place padding meets the model.

Every role keeps its batch in a padded `[N, L]` layout (`attention_mask` 1 on real tokens).
With packing (`training.packingSamples`) the real tokens of the `N` rows are concatenated, so
no padding token is computed; outputs are gathered back into the padded layout, and every loss
reads them exactly as before. FlashAttention's varlen kernel and FlexAttention's block-sparse
mask cost what the sequences cost however long the row, so there everything goes into one row
`[1, T]`, `T = attention_mask.sum()`.
The mask-based kernels (`sdpa`, `eager`: the CPU ones) compute a dense `T x T` block-diagonal
mask, quadratic in the row's length: one row of a 32-sample micro-batch took twice the padded
batch's time. For them the sequences are packed in order into rows no longer than the padded
batch's width (the next sequence that does not fit starts a new row), so a packed forward never
computes more than the padded one, and rows hold several sequences when they are short.

Sequences stay apart through their position ids, which restart at 0 for each sequence:
transformers 5.x reads sequence starts from them when no attention mask is given (its
`find_packed_sequence_indices`) and builds a block-diagonal causal mask for `sdpa` and `eager`,
row by row, or calls FlashAttention-2's varlen kernel (for one row only). Two conditions, both met
below: `attention_mask=None`, and no KV cache (`use_cache=False`; with a cache, transformers
skips the detection and the row attends across its sequences). A model whose own code ignores
position ids would still mix sequences, so `check_packing` compares a packed forward with
separate ones before training starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .value import position_ids_from_mask

# Outputs of a packed probe may differ from separate forwards by kernel rounding only.
PROBE_TOLERANCE = 1e-3


class PackingError(RuntimeError):
    """The model does not keep packed sequences apart."""


@dataclass(frozen=True)
class Packed:
    """The real tokens of a padded `[N, L]` batch in `R` rows, and where each came from."""

    input_ids: Tensor  # [R, W]
    # [R, W], restarting at 0 with every sequence; a row's unused tail counts as one more.
    position_ids: Tensor
    # [N, L]: the index of each padded position in the flattened `[R * W]` rows, -1 on padding.
    index: Tensor

    @property
    def real(self) -> Tensor:
        return self.index >= 0


def pack(input_ids: Tensor, attention_mask: Tensor, row_tokens: int | None = None) -> Packed:
    """Every real token of `input_ids`, sequence after sequence, in one row, or with
    `row_tokens` in rows of at most that many tokens (at least the longest sequence)."""
    real = attention_mask != 0
    device = input_ids.device
    lengths = [int(n) for n in real.sum(-1).tolist()]
    capacity = sum(lengths) if row_tokens is None else max(row_tokens, *lengths)
    fill, starts = [0], []
    for n in lengths:  # in order: the next sequence that does not fit starts a new row
        if fill[-1] and fill[-1] + n > capacity:
            fill.append(0)
        starts.append((len(fill) - 1, fill[-1]))
        fill[-1] += n
    width = max(fill)
    first = torch.tensor([row * width + offset for row, offset in starts], device=device)
    # A real token's place: its sequence's start + how many real tokens precede it in its row.
    flat = first[:, None] + real.long().cumsum(-1) - 1
    index = torch.where(real, flat, torch.full_like(flat, -1))
    ids = input_ids.new_zeros(len(fill) * width)
    ids[index[real]] = input_ids[real]
    # Unused tails (padding, after every real token of their row) get positions 0, 1, ...
    tail = torch.arange(width, device=device) - torch.tensor(fill, device=device)[:, None]
    positions = tail.clamp(min=0).flatten()
    positions[index[real]] = position_ids_from_mask(attention_mask)[real]
    return Packed(ids.view(len(fill), width), positions.view(len(fill), width), index)


def unpack(packed_output: Tensor, packed: Packed, columns: slice = slice(None)) -> Tensor:
    """`[R, W, ...]` outputs of a packed forward in the padded layout `[N, L', ...]` (the
    padded batch's `columns`), 0 on padding; gradients reach real positions only."""
    index, real = packed.index[:, columns], packed.real[:, columns]
    out = packed_output.flatten(0, 1)[index.clamp(min=0)]
    shape = real.shape + (1,) * (out.dim() - 2)
    return torch.where(real.reshape(shape), out, out.new_zeros(()))


def row_limit(model: nn.Module, input_ids: Tensor) -> int | None:
    """The packed rows' length limit for `model` (None: one row); see the module's doc."""
    inner = getattr(model, "module", model)  # a DeepSpeed engine's model
    kernel = str(getattr(getattr(inner, "config", None), "_attn_implementation", "") or "")
    # FlashAttention's varlen kernel and FlexAttention's block mask cost what the sequences
    # cost, however long the row: one row, no padding at all.
    return None if "flash" in kernel or "flex" in kernel else int(input_ids.shape[1])


def causal_lm_logits(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    packed: bool,
    columns: slice = slice(None),
) -> Tensor:
    """Logits `[N, L', V]` of a causal LM (or an engine around one) at the padded batch's
    `columns`; computed on one packed row when `packed`."""
    if not packed:
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
        )
        logits: Tensor = out.logits[:, columns]
        return logits
    row = pack(input_ids, attention_mask, row_limit(model, input_ids))
    out = model(
        input_ids=row.input_ids,
        attention_mask=None,
        position_ids=row.position_ids,
        use_cache=False,
    )
    return unpack(out.logits, row, columns)


def token_values(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, *, packed: bool
) -> Tensor:
    """Per-token values `[N, L]` of a value model (`ValueModel` or an engine around one)."""
    if not packed:
        values: Tensor = model(input_ids, attention_mask)
        return values
    row = pack(input_ids, attention_mask, row_limit(model, input_ids))
    return unpack(model(row.input_ids, None, row.position_ids), row)


def check_packing(
    forward: Callable[[Tensor, Tensor], Tensor], vocab_size: int, device: torch.device
) -> None:
    """Refuse a model that attends across packed sequences.

    `forward(input_ids [1, T], position_ids [1, T])` returns per-token outputs `[1, T, ...]`
    of a packed forward (attention mask None, no cache). Three short sequences go through
    once packed and once each alone; any difference beyond rounding means the packed row's
    attention was not kept apart.
    """
    generator = torch.Generator().manual_seed(0)
    lengths = (3, 5, 4)
    sequences = [
        torch.randint(0, vocab_size, (n,), generator=generator).to(device) for n in lengths
    ]
    positions = [torch.arange(n, device=device) for n in lengths]
    with torch.no_grad():
        together = forward(torch.cat(sequences)[None], torch.cat(positions)[None])[0].float()
        pairs = zip(sequences, positions, strict=True)
        alone = torch.cat([forward(s[None], p[None])[0].float() for s, p in pairs])
    scale = float(alone.abs().max()) or 1.0
    error = float((together - alone).abs().max()) / scale
    if not error <= PROBE_TOLERANCE:
        raise PackingError(
            "training.packingSamples: this model attends across packed sequences (a packed "
            f"forward differs from separate ones by {error:.3g} of its output scale): its "
            "attention does not read sequence starts from position ids; set packingSamples "
            "false for it, or use a transformers architecture that supports packed inputs"
        )
