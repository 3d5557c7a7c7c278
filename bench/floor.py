"""The machine's floor for one RL step: memory bandwidth and matmul rate, and from them the least
time each phase of the step could take here. One JSON line.

    .venv/bin/python bench/floor.py [--size tiny|M|L] [--dtype fp32|bf16] [--repeats 5]

Measured (best of `--repeats`, all cores, torch's own threads):
- memory bandwidth: a STREAM-like copy `b[:] = a` of a 512 MiB buffer (bytes read + written
  per second), with torch and with numpy; the larger is the floor's;
- matmul rate: `x @ w` in the job's dtype at the L model's MLP shape (tokens x hidden x
  intermediate), FLOP/s = 2 M N K / s, best of at least 100 products.

Floors (pure arithmetic in `phase_floors`, counted on the model's parameters N, embeddings
excluded since they are a lookup, not a matmul; attention's own score matmuls are left out:
at ~100 tokens they are ~1 % of the work):
- generation (decode): every new token of the batch reads every weight once, so
  `new_tokens x N x bytes_per_weight / bandwidth` (or the batch's 2 N flops per token at the
  matmul rate, if that is slower); the prompt's prefill is one forward of 2 N x prompt tokens;
- make_experience (the old log-probs): one forward, 2 N x tokens / matmul rate;
- training: forward + backward 6 N x tokens / matmul rate, plus AdamW's pass over fp32
  weights, gradients and two moments (7 x 4 bytes per parameter read or written);
- weight_sync: the weights read once and written once (2 x N x bytes per weight).
bench/ppo_step.py runs the probe before its rounds and prints each phase of ours as a multiple
of these floors (goals: generation <= 1.5x, training <= 1.3x).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SIZES, default_dtype

BYTES = {"bf16": 2, "fp32": 4}
ADAMW_BYTES_PER_PARAM = 7 * 4  # read weight, grad, m, v; write weight, m, v (fp32)


@dataclass(frozen=True)
class Machine:
    bandwidth_gb_s: float  # copy: bytes read + written per second / 1e9
    matmul_tflop_s: float  # in the job's dtype
    dtype: str


@dataclass(frozen=True)
class Work:
    """One step's work: the model's matmul parameters and the batch's token counts."""

    params: int  # parameters that take part in matmuls (embeddings excluded, lm_head included)
    samples: int
    prompt_tokens: float  # per sample
    response_tokens: float  # per sample (generated)


def model_params(size: str) -> int:
    """Matmul parameters of the benchmark's random-init Llama of `size` (from its config)."""
    from rlhf_trainer.config import RandomInit

    spec = RandomInit.model_validate(SIZES[size])
    h, layers, inter, vocab = (
        spec.hidden_size,
        spec.num_layers,
        spec.intermediate_size,
        spec.vocab_size,
    )
    attention = 4 * h * h  # q, k, v, o (RandomInit has as many key/value heads as heads)
    mlp = 3 * h * inter
    return layers * (attention + mlp) + h * vocab  # + lm_head


def phase_floors(machine: Machine, work: Work, old_logps: bool = True) -> dict[str, float]:
    """Least seconds per phase of one step on `machine` (pure). Without `old_logps` (on-policy:
    one optimizer step per batch, no KL, the update's own forward gives them) the experience
    phase runs no model and has no floor here."""
    rate = machine.matmul_tflop_s * 1e12
    bw = machine.bandwidth_gb_s * 1e9
    weight_bytes = work.params * BYTES[machine.dtype]
    tokens = work.samples * (work.prompt_tokens + work.response_tokens)
    decode_step = max(weight_bytes / bw, 2 * work.params * work.samples / rate)
    prefill = 2 * work.params * work.samples * work.prompt_tokens / rate
    return {
        "generation": work.response_tokens * decode_step + prefill,
        "make_experience": 2 * work.params * tokens / rate if old_logps else 0.0,
        "training": 6 * work.params * tokens / rate + work.params * ADAMW_BYTES_PER_PARAM / bw,
        "weight_sync": 2 * weight_bytes / bw,
    }


def multiples(phases_s: dict[str, float], floors: dict[str, float]) -> dict[str, float]:
    """Each measured phase as a multiple of its floor."""
    return {k: round(phases_s[k] / floors[k], 2) for k in floors if phases_s.get(k) and floors[k]}


def prompt_tokens(size: str) -> float:
    """Mean length of the benchmark's chat-templated prompts (both letters), in tokens."""
    from common import bench_model

    from rlhf_trainer.data.builtin import repeat_letter_prompt

    _, tokenizer = bench_model(size)
    lengths = [
        len(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": repeat_letter_prompt(letter)}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
        )
        for letter in "ab"
    ]
    return sum(lengths) / len(lengths)


def _best(fn: Any, repeats: int) -> float:
    fn()  # warm: page faults, oneDNN kernel selection
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _copy_s(src: Any, dst: Any, repeats: int) -> float:
    """Best seconds of `dst[:] = src` (torch tensors or numpy arrays)."""
    return _best(lambda: dst.__setitem__(slice(None), src), repeats)


def probe(dtype: str, repeats: int = 5, mib: int = 512) -> tuple[Machine, dict[str, Any]]:
    """Measure this machine: (Machine, details)."""
    import numpy as np
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    n = mib * 2**20 // 4
    torch_copy = 2 * n * 4 / _copy_s(torch.ones(n), torch.empty(n), repeats) / 1e9
    numpy_copy = 2 * n * 4 / _copy_s(np.ones(n, np.float32), np.empty(n, np.float32), repeats) / 1e9
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    m, k, n_out = 3072, 768, 2048  # 32 samples x 96 tokens, L's hidden and intermediate
    x = torch.randn(m, k, dtype=torch_dtype)
    w = torch.randn(k, n_out, dtype=torch_dtype)
    # One product takes ~3 ms here: best of 100 (0.3 s), since a few repeats read anywhere
    # from 1.3 to 3.3 TFLOP/s on a shared host (a stall spans them all).
    matmul = 2 * m * k * n_out / _best(lambda: x @ w, max(repeats, 100)) / 1e12
    machine = Machine(round(max(torch_copy, numpy_copy), 2), round(matmul, 3), dtype)
    details = {
        "copy_gb_s": {"torch": round(torch_copy, 2), "numpy": round(numpy_copy, 2)},
        "copy_mib": mib,
        "matmul_shape": [m, k, n_out],
        "threads": torch.get_num_threads(),
    }
    return machine, details


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="L")
    parser.add_argument("--dtype", choices=sorted(BYTES), help="Default: by CPU flags.")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=float, help="Default: the bench's prompts.")
    parser.add_argument("--new-tokens", type=float, default=64.0)
    args = parser.parse_args()
    dtype = args.dtype or default_dtype()[0]
    machine, details = probe(dtype, args.repeats)
    prompt = args.prompt_tokens or prompt_tokens(args.size)
    work = Work(model_params(args.size), args.samples, prompt, args.new_tokens)
    floors = phase_floors(machine, work)
    line = {
        "bench": "floor",
        "cpu": cpu_model(),
        **asdict(machine),
        **details,
        "size": args.size,
        "work": asdict(work),
        "floor_s": {k: round(v, 4) for k, v in floors.items()},
    }
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
