"""The actor's passes at GPU size, ours packed and padded beside TRL's training step; JSON lines.

    python bench/gpu_check.py [--size tiny|0.5B|1B] [--device auto|cuda|cpu] [--samples 32]
        [--micro 8] [--prompt 16:128] [--response 16:512] [--iters 3] [--warmup 1]

For a GPU machine that has torch and transformers only (no Ray, vLLM, DeepSpeed, pydantic or
TRL): the model is a random-init Llama built from a config (`--size`; 0.5B and 1B are GPU
sizes, tiny is the CPU smoke check the default suite runs), the batch a GRPO batch of
`--samples` rows, each prompt left-padded and each response right-padded to random lengths in
`--prompt` and `--response` (about half the positions are padding with the defaults).

Printed, one JSON line each (median seconds over `--iters` after `--warmup`, peak memory on a
GPU, tokens per second counted on real tokens):
- `impl: rlhf`, `pass: log_probs` and `pass: update`, `mode: padded` and `mode: packed`: the
  actor rank's own code (`rlhf_trainer.distributed.forward.action_log_probs` over trimmed
  micro-batches, `rlhf_trainer.algos.losses.ppo_policy_loss` token-mean, backward, one fused
  AdamW step), in plain torch: the DeepSpeed wrapper is left out on both sides;
- `impl: trl`, `pass: update`: TRL 1.16 GRPOTrainer's training step on the same batch, as its
  `_compute_loss` computes it: every micro-batch padded to its widest row (no trimming, no
  packing), the backbone over all of it, the LM head and log-softmax over the completion
  positions only (its fused LM head's result, which TRL computes in tiles), the DAPO loss
  (TRL's default `loss_type`: clipped surrogate summed over the batch's real tokens and divided
  by their count), backward, one fused AdamW step. TRL is not installed there, so its step is
  restated here; `bench/ppo_step.py` measures the real trainer on CPU;
- `comparison`: ours (packed and padded) over TRL, per pass.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer_image" / "src"))
from rlhf_trainer.algos.losses import ppo_policy_loss
from rlhf_trainer.distributed.forward import action_log_probs, in_chunks, trim_padding

# (hidden, layers, heads, intermediate, vocab): 0.5B and 1B are Llama shapes of those sizes.
SHAPES = {
    "tiny": (64, 2, 2, 128, 512),
    "0.5B": (1536, 16, 12, 4096, 32000),
    "1B": (2048, 16, 16, 5632, 32000),
}
FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab")
CLIP = 0.2


def build_model(size: str, device: torch.device, dtype: torch.dtype, seed: int) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    *shape, vocab = SHAPES[size]
    config = LlamaConfig(
        **dict(zip(FIELDS, shape, strict=False)),
        vocab_size=vocab,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype)
    model.config.use_cache = False
    return model


def make_batch(args: argparse.Namespace, vocab: int, device: torch.device) -> dict[str, Tensor]:
    """A GRPO batch in the experience layout (rlhf_trainer.distributed.forward)."""
    g = torch.Generator().manual_seed(args.seed)
    lo_p, hi_p = args.prompt
    lo_r, hi_r = args.response
    n = args.samples
    prompts = torch.randint(lo_p, hi_p + 1, (n,), generator=g)
    responses = torch.randint(lo_r, hi_r + 1, (n,), generator=g)
    ids = torch.zeros(n, hi_p + hi_r, dtype=torch.long)
    mask = torch.zeros_like(ids)
    actions = torch.zeros(n, hi_r, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts.tolist(), responses.tolist(), strict=True)):
        ids[i, hi_p - p : hi_p + r] = torch.randint(1, vocab, (p + r,), generator=g)
        mask[i, hi_p - p : hi_p + r] = 1
        actions[i, :r] = 1
    advantages = torch.randn(n, 1, generator=g).expand(n, hi_r) * actions
    batch = {"input_ids": ids, "attention_mask": mask, "action_mask": actions}
    batch["advantages"] = advantages.contiguous()
    return {k: v.to(device) for k, v in batch.items()}


def ours_log_probs(model: nn.Module, batch: dict[str, Tensor], micro: int, packed: bool) -> None:
    with torch.no_grad():
        for part in in_chunks(batch, micro):
            action_log_probs(model, trim_padding(part), 1.0, packed=packed)


def ours_update(
    model: nn.Module,
    optim: torch.optim.Optimizer,
    batch: dict[str, Tensor],
    micro: int,
    packed: bool,
) -> None:
    parts = in_chunks(batch, micro)
    for part in parts:
        part = trim_padding(part)
        logp, _ = action_log_probs(model, part, 1.0, with_entropy=True, packed=packed)
        loss, _ = ppo_policy_loss(
            logp, logp.detach(), part["advantages"], part["action_mask"], CLIP, CLIP
        )
        (loss / len(parts)).backward()
    optim.step()
    optim.zero_grad(set_to_none=True)


def trl_log_probs(model: Any, ids: Tensor, mask: Tensor, completion: int) -> Tensor:
    """TRL's per-token log-probs of the last `completion` tokens: the backbone over the whole
    padded row, the LM head and log-softmax over the completion positions only."""
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    logits = model.lm_head(hidden[:, -completion - 1 : -1]).float()
    return logits.log_softmax(-1).gather(-1, ids[:, -completion:, None]).squeeze(-1)


def trl_update(
    model: nn.Module, optim: torch.optim.Optimizer, batch: dict[str, Tensor], micro: int
) -> None:
    completion = batch["action_mask"].shape[1]
    tokens = batch["action_mask"].sum()
    for part in in_chunks(batch, micro):
        logp = trl_log_probs(model, part["input_ids"], part["attention_mask"], completion)
        ratio = torch.exp(logp - logp.detach())
        adv = part["advantages"]
        per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - CLIP, 1 + CLIP) * adv)
        ((per_token * part["action_mask"]).sum() / tokens).backward()
    optim.step()
    optim.zero_grad(set_to_none=True)


def timed(fn: Callable[[], None], device: torch.device, warmup: int, iters: int) -> list[float]:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for i in range(warmup + iters):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def _bound(
    run: Callable[[nn.Module, torch.optim.Optimizer], None],
    model: nn.Module,
    optim: torch.optim.Optimizer,
) -> Callable[[], None]:
    return lambda: run(model, optim)


def span(text: str) -> tuple[int, int]:
    low, high = (int(x) for x in text.split(":"))
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH with 0 < LOW <= HIGH, got {text!r}")
    return low, high


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SHAPES), default="1B")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--prompt", type=span, default=(16, 128))
    parser.add_argument("--response", type=span, default=(16, 512))
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    name = args.device if args.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    device = torch.device(name)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    vocab = SHAPES[args.size][-1]
    batch = make_batch(args, vocab, device)
    real = int(batch["attention_mask"].sum())
    base = {
        "bench": "gpu_check",
        "size": args.size,
        "device": torch.cuda.get_device_name() if name == "cuda" else "cpu",
        "dtype": args.dtype,
        "samples": args.samples,
        "micro": args.micro,
        "real_tokens": real,
        "padding_share": round(1 - real / batch["attention_mask"].numel(), 3),
    }
    runs: dict[str, Callable[[nn.Module, torch.optim.Optimizer], None]] = {
        "rlhf/log_probs/padded": lambda m, o: ours_log_probs(m, batch, args.micro, False),
        "rlhf/log_probs/packed": lambda m, o: ours_log_probs(m, batch, args.micro, True),
        "rlhf/update/padded": lambda m, o: ours_update(m, o, batch, args.micro, False),
        "rlhf/update/packed": lambda m, o: ours_update(m, o, batch, args.micro, True),
        "trl/update/padded": lambda m, o: trl_update(m, o, batch, args.micro),
    }
    medians: dict[str, float] = {}
    for key, run in runs.items():
        model = build_model(args.size, device, dtype, args.seed)
        optim = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=name == "cuda" or None)
        if name == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times = timed(_bound(run, model, optim), device, args.warmup, args.iters)
        impl, phase, mode = key.split("/")
        medians[key] = statistics.median(times)
        line = base | {"impl": impl, "pass": phase, "mode": mode}
        line |= {
            "params": sum(p.numel() for p in model.parameters()),
            "median_s": round(medians[key], 4),
            "times_s": [round(t, 4) for t in times],
            "real_tokens_per_s": round(real / medians[key], 1),
        }
        if name == "cuda":
            line["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        print(json.dumps(line), flush=True)
        del model, optim
    trl = medians["trl/update/padded"]
    ratios = {
        f"update_{mode}_over_trl": round(medians[f"rlhf/update/{mode}"] / trl, 3)
        for mode in ("padded", "packed")
    }
    print(json.dumps(base | {"comparison": "rlhf/trl actor update", **ratios}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
