"""A vLLM engine's generation tokens/s with tensor parallelism 1 and 2 (and more); JSON lines.

    .venv/bin/python bench/engine_tp.py [--size tiny|M|L] [--tp 1,2] [--prompts 32]
        [--new-tokens 128] [--dtype fp32|bf16 (default: by CPU flags)] [--calls 3] [--repeats 3]

The engine is ours (`rlhf_trainer.distributed.vllm_engine.VLLMEngine`, as the trainer starts
it, without Ray around it), on the same random-init Llama as `bench/ppo_step.py`: `--prompts`
chat-templated repeat-letter prompts, `--new-tokens` sampled tokens each (temperature 1, one
seed per prompt). Each configuration runs in its own process (an engine's start-up and its
threads never overlap another's), rounds interleaved (tp 1, tp 2, tp 1, ...) because the
machine is noisy. Printed per run: generation tokens/s (median of `--calls` calls after one
warm-up call), start-up seconds, and the seconds one full weight reload takes (the trainer's
object-store sync: every rank receives the full tensors and keeps its shard); then a summary
line with medians and the ratio to tp 1.

On CPUs each rank of a tensor-parallel engine is bound to its own share of the cores
(`engine_parallel.cpu_bind`): on 2 cores, tp 2 gives each rank one core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SIZES, bench_model, child_main, run_child


def child(args: argparse.Namespace, tp: int) -> dict[str, Any]:
    """One engine of `tp` ranks: start, warm up, measure (runs in its own process)."""
    import torch

    from rlhf_trainer.data.builtin import repeat_letter_prompt
    from rlhf_trainer.distributed.cluster import kv_cache_bytes
    from rlhf_trainer.distributed.vllm_engine import EngineSettings, SamplingSettings, VLLMEngine
    from rlhf_trainer.distributed.weights import pack
    from rlhf_trainer.models.loading import load_causal_lm

    model_dir, tokenizer = bench_model(args.size)
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": repeat_letter_prompt("ab"[i % 2])}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for i in range(args.prompts)
    ]
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    max_len = max(len(p) for p in prompts) + args.new_tokens
    dtype_bytes = 2 if args.dtype == "bf16" else 4
    settings = EngineSettings(
        model_dir=model_dir,
        dtype="bfloat16" if args.dtype == "bf16" else "float32",
        seed=0,
        max_model_len=max_len,
        gpu_memory_utilization=0.1,
        enforce_eager=True,
        on_gpu=False,
        kv_cache_bytes=kv_cache_bytes(model_dir, args.prompts, max_len, dtype_bytes, tp),
        deterministic=True,
        threads=os.cpu_count() or 1,
        tensor_parallel_size=tp,
    )
    start = time.perf_counter()
    engine = VLLMEngine(settings)
    startup = time.perf_counter() - start
    sampling = SamplingSettings(1, args.new_tokens, 1.0, 1.0, -1)
    seeds = list(range(len(prompts)))
    engine.generate(prompts, seeds, sampling)  # warm-up
    rates = []
    for _ in range(args.calls):
        start = time.perf_counter()
        out = engine.generate(prompts, seeds, sampling)
        seconds = time.perf_counter() - start
        rates.append(sum(len(g[0].token_ids) for g in out) / seconds)
    torch_dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = load_causal_lm(model_dir, dtype=torch_dtype)
    packed = pack([(n, t.detach().contiguous()) for n, t in model.state_dict().items()])
    start = time.perf_counter()
    engine.load_packed(packed)
    reload_s = time.perf_counter() - start
    return {
        "bench": "engine_tp",
        "size": args.size,
        "dtype": args.dtype,
        "tensor_parallel_size": tp,
        "cpus": len(os.sched_getaffinity(0)),
        "prompts": args.prompts,
        "max_new_tokens": args.new_tokens,
        "tokens_per_s": round(statistics.median(rates), 1),
        "tokens_per_s_calls": [round(r, 1) for r in rates],
        "startup_s": round(startup, 1),
        "weight_reload_s": round(reload_s, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="M")
    parser.add_argument("--tp", default="1,2", help="Tensor-parallel sizes, comma-separated.")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], help="Default: by CPU flags.")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="Interleaved rounds.")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if child_main(args, "engine_tp", child):
        return 0
    sizes = [int(x) for x in args.tp.split(",")]
    runs: dict[int, list[dict[str, Any]]] = {tp: [] for tp in sizes}
    for round_index in range(args.repeats):
        for tp in sizes:
            result = run_child(__file__, str(tp)) | {"round": round_index}
            runs[tp].append(result)
            print(json.dumps(result), flush=True)
    medians = {tp: statistics.median(r["tokens_per_s"] for r in runs[tp]) for tp in sizes}
    base = medians[sizes[0]]
    print(
        json.dumps(
            {
                "bench": "engine_tp",
                "comparison": f"tokens/s by tensor-parallel size, relative to tp {sizes[0]}",
                "size": args.size,
                "dtype": args.dtype,
                "rounds": args.repeats,
                "tokens_per_s": {str(tp): round(m, 1) for tp, m in medians.items()},
                "ratio": {str(tp): round(m / base, 3) for tp, m in medians.items()},
                "weight_reload_s": {
                    str(tp): round(statistics.median(r["weight_reload_s"] for r in runs[tp]), 3)
                    for tp in sizes
                },
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
