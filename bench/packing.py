"""Sample packing vs padding: the actor's PPO update on one batch, side by side; JSON lines.

    .venv/bin/python bench/packing.py [--size M] [--samples 32] [--micro 8] [--prompt 4:28]
        [--response 1:96] [--dtype fp32|bf16] [--attn sdpa|eager|flex_attention]
        [--iters 3] [--repeats 3] [--device cpu|cuda]

The work of one training phase of a GRPO/PPO step, done the way the actor rank does it
(`distributed.workers.trained`): `--samples` rollouts in micro-batches of `--micro`, each
trimmed of its all-padding columns, forward through the same `action_log_probs` (entropy
included) and `policy_objective`, backward, then one AdamW step. Padded rows put every prompt
at a random length in `--prompt` (left-padded) and every response at a random length in
`--response` (right-padded): with the defaults about half of the computed positions are
padding, as in a GRPO batch whose responses range from a few tokens to `maxNewTokens`.
Packed, each micro-batch's real tokens are one row (`models.packing`): no padding computed.

Printed, one JSON line each: `mode: padded` and `mode: packed` (median wall and CPU seconds
per update over `--repeats` interleaved rounds of `--iters` updates, tokens computed, the
padding share), then `comparison`: the packed/padded time ratios and savings (goal: >= 30 %
at 50 % padding). On a shared machine wall time is mostly waiting for a core: with
`--threads 1` (the default) the CPU seconds measure the work itself. Plain torch in one
process (DeepSpeed's bf16 engine adds fp32 master weights and runs the same forward and
backward, which dominate the update's time on CPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SIZES

from rlhf_trainer.config import RandomInit
from rlhf_trainer.distributed.forward import action_log_probs, trim_padding
from rlhf_trainer.models.loading import LoadOptions, load_causal_lm
from rlhf_trainer.models.tiny import build_tiny_model
from rlhf_trainer.objectives.online import PolicyLossSettings, policy_objective

# A GPU-sized model beside bench/ppo_step.py's CPU sizes (about 0.86B parameters): on an H100/H200
# the CPU sizes are too small for the saving of packing to show above kernel-launch latency.
BENCH_SIZES = SIZES | {
    "1B": {
        "hiddenSize": 2048,
        "numLayers": 16,
        "numHeads": 16,
        "intermediateSize": 5632,
        "vocabSize": 8192,
        "maxPositionEmbeddings": 2048,
    }
}

SETTINGS = PolicyLossSettings(
    clip_low=0.2,
    clip_high=0.2,
    dual_clip=None,
    aggregation="token-mean",
    norm_length=None,
    entropy_coef=0.0,
    use_kl_loss=False,
    kl_estimator="k1",
)


def span(text: str) -> tuple[int, int]:
    low, high = (int(x) for x in text.split(":"))
    return low, high


def rollout_batch(args: argparse.Namespace, vocab: int) -> dict[str, Tensor]:
    """`[left padding | prompt | response | right padding]` rows, as `loop.batch.to_batch`."""
    generator = torch.Generator().manual_seed(0)
    (p_low, p_high), (r_low, r_high) = span(args.prompt), span(args.response)
    prompts = torch.randint(p_low, p_high + 1, (args.samples,), generator=generator).tolist()
    responses = torch.randint(r_low, r_high + 1, (args.samples,), generator=generator).tolist()
    width_p, width_r = max(prompts), max(responses)
    ids = torch.zeros((args.samples, width_p + width_r), dtype=torch.long)
    mask, actions = torch.zeros_like(ids), torch.zeros((args.samples, width_r), dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        ids[row, width_p - p : width_p + r] = torch.randint(3, vocab, (p + r,), generator=generator)
        mask[row, width_p - p : width_p + r] = 1
        actions[row, :r] = 1
    batch = {"input_ids": ids, "attention_mask": mask, "action_mask": actions}
    batch["advantages"] = torch.randn(actions.shape, generator=generator)
    batch["old_logps"] = -torch.rand(actions.shape, generator=generator) * 5
    return batch


def micro_batches(batch: dict[str, Tensor], micro: int) -> list[dict[str, Tensor]]:
    rows = batch["input_ids"].shape[0]
    chunks = ({k: v[i : i + micro] for k, v in batch.items()} for i in range(0, rows, micro))
    return [trim_padding(chunk) for chunk in chunks]


def update(
    model: Any, optimizer: Any, micros: list[dict[str, Tensor]], packed: bool
) -> tuple[float, float]:
    """One update; (wall seconds, CPU seconds of this process)."""
    synchronize()
    started, cpu = time.perf_counter(), time.process_time()
    for micro in micros:
        logp, _ = action_log_probs(model, micro, 1.0, with_entropy=True, packed=packed)
        loss, _ = policy_objective(
            logp, micro["old_logps"], micro["advantages"], micro["action_mask"], SETTINGS, kl_coef=0
        )
        (loss / len(micros)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    synchronize()  # a GPU runs the update asynchronously: time it to its end
    return time.perf_counter() - started, time.process_time() - cpu


def synchronize() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(BENCH_SIZES), default="M")
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--prompt", default="4:28", help="prompt lengths, low:high")
    parser.add_argument("--response", default="1:96", help="response lengths, low:high")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="fp32")
    parser.add_argument(
        "--attn", choices=("sdpa", "eager", "flex_attention", "flash_attention_2"), default="sdpa"
    )
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: default)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as work:
        model_dir = build_tiny_model(
            RandomInit.model_validate(BENCH_SIZES[args.size]), Path(work) / "m"
        )
        dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
        model: Any = load_causal_lm(model_dir, dtype, LoadOptions(attn_implementation=args.attn))
    model.to(args.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, foreach=False)
    batch = rollout_batch(args, model.config.vocab_size)
    micros = [
        {k: v.to(args.device) for k, v in m.items()} for m in micro_batches(batch, args.micro)
    ]
    real = int(batch["attention_mask"].sum())
    computed = {
        "padded": sum(int(m["attention_mask"].numel()) for m in micros),
        "packed": real,
    }
    update(model, optimizer, micros, packed=False)  # warm-up (allocator, kernels)
    update(model, optimizer, micros, packed=True)
    times: dict[str, list[float]] = {"padded": [], "packed": []}
    cpu: dict[str, list[float]] = {"padded": [], "packed": []}
    for _ in range(args.repeats):  # interleaved: the machine's noise hits both alike
        for mode in ("padded", "packed"):
            runs = [update(model, optimizer, micros, mode == "packed") for _ in range(args.iters)]
            times[mode].append(statistics.median(r[0] for r in runs))
            cpu[mode].append(statistics.median(r[1] for r in runs))
            print(f"{mode}: {times[mode][-1]:.3f} s", file=sys.stderr, flush=True)
    common = {"bench": "packing", "size": args.size, "dtype": args.dtype, "attn": args.attn}
    common |= {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    common |= {"samples": args.samples, "micro": args.micro, "threads": args.threads}
    common |= {"real_tokens": real}
    for mode in ("padded", "packed"):
        line = {
            **common,
            "mode": mode,
            "update_s": round(statistics.median(times[mode]), 3),
            "rounds_s": [round(t, 3) for t in times[mode]],
            "update_cpu_s": round(statistics.median(cpu[mode]), 3),
            "tokens_computed": computed[mode],
            "padding_share": round(1 - real / computed[mode], 3),
        }
        print(json.dumps(line), flush=True)
    ratios = [p / q for p, q in zip(times["packed"], times["padded"], strict=True)]
    cpu_ratios = [p / q for p, q in zip(cpu["packed"], cpu["padded"], strict=True)]
    ratio, cpu_ratio = statistics.median(ratios), statistics.median(cpu_ratios)
    comparison = {**common, "mode": "comparison", "packed_over_padded": round(ratio, 3)}
    comparison |= {"saving": round(1 - ratio, 3), "round_ratios": [round(r, 3) for r in ratios]}
    # CPU seconds: the work itself, robust to a shared machine's waiting (one thread).
    comparison |= {"cpu_packed_over_padded": round(cpu_ratio, 3)}
    comparison |= {"cpu_saving": round(1 - cpu_ratio, 3)}
    print(json.dumps(comparison), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
