"""HF `generate` as the rollout engine (the `rollout.engine: hf` fallback, slow at scale).

Seeded sampling uses one seed per call (HF samples from the global torch RNG, here forked so
the rank's own stream is untouched): results depend on the weights, the prompts of the call
and the seed. Unseeded, the rank's own (checkpointed) RNG stream is used.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..vllm_engine import Generated, SamplingSettings


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def cut_response(tokens: list[int], stop_ids: set[int], pad_id: int) -> tuple[list[int], str]:
    """Tokens up to and including the first stop token ("stop"); else unpadded ("length")."""
    for i, token in enumerate(tokens):
        if token in stop_ids:
            return tokens[: i + 1], "stop"
    while tokens and tokens[-1] == pad_id and pad_id not in stop_ids:
        tokens = tokens[:-1]
    return tokens, "length"


@torch.no_grad()
def generate_responses(
    model: nn.Module,
    prompts: list[list[int]],
    seeds: list[int],
    sampling: SamplingSettings,
    pad_id: int,
    device: torch.device,
    *,
    synced: bool,
    tokenizer: Any = None,
) -> list[list[Generated]]:
    if not prompts:
        return []
    expanded = [p for p in prompts for _ in range(sampling.n)]
    ids, mask = left_pad(expanded, pad_id)
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    stop_ids = set(sampling.stop_token_ids) | (
        set(eos) if isinstance(eos, list) else ({eos} if eos is not None else set())
    )
    kwargs: dict[str, Any] = {
        "max_new_tokens": sampling.max_new_tokens,
        "do_sample": sampling.temperature > 0,
        "pad_token_id": pad_id,
        "eos_token_id": sorted(stop_ids) or None,
        "synced_gpus": synced,
    }
    if sampling.temperature > 0:
        kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p)
        kwargs["top_k"] = sampling.top_k if sampling.top_k > 0 else None
    if sampling.stop:
        kwargs.update(stop_strings=list(sampling.stop), tokenizer=tokenizer)
    with torch.random.fork_rng(devices=[], enabled=sampling.seeded):
        if sampling.seeded:
            torch.manual_seed(seeds[0] if seeds else 0)
        out = model.generate(  # type: ignore[operator]
            input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs
        )
    responses = out[:, ids.shape[1] :].cpu().tolist()
    results: list[list[Generated]] = []
    for start in range(0, len(responses), sampling.n):
        group = []
        for tokens in responses[start : start + sampling.n]:
            kept, reason = cut_response(tokens, stop_ids, pad_id)
            group.append(Generated(token_ids=kept, logprobs=[], finish_reason=reason))
        results.append(group)
    return results
