"""One RL step, phase by phase, and the same GRPO step through TRL's GRPOTrainer; JSON lines.

    .venv/bin/python bench/ppo_step.py [--size tiny|M|L] [--steps 6] [--warmup 2]
        [--dtype fp32|bf16] [--prompts 8] [--samples 4] [--new-tokens 64] [--repeats 1]
        [--algorithms grpo,ppo] [--variants sync,async,packed] [--skip-trl]

Identical work on both sides (BENCH.md): the same random-init Llama and tokenizer, the same
chat-templated repeat-letter prompts, `--samples` generations of `--new-tokens` tokens per prompt,
one optimizer step over the whole batch per step (one PPO epoch), the same reward function,
no KL term (so neither side runs a reference model), no gradient checkpointing. Ours runs
through `rlhf run`'s code path (Ray placement, DeepSpeed ranks, vLLM engine, weight sync).
The TRL side needs trl==1.16.0 beside the venv: `make bench-deps` (bench/README.md).
`--dtype` defaults to bf16 only where the CPU has native bf16 (avx512_bf16 or amx_bf16 in
/proc/cpuinfo), else fp32; the first line says which and why.

Printed, one JSON line each:
- `impl: rlhf, algorithm: grpo` and `algorithm: ppo` (critic + GAE), for each of
  `--variants`: `sync`, `async` (`rollout.async`), `packed` (`training.packingSamples`),
  `async-packed`: median seconds per phase over the measured steps (generation,
  weight_sync, make_experience, training, total; with async, generation is only the wait for
  a batch generated during the previous step, and `engine_generation_s` the engines' own
  time), generated tokens/s, weight sync as a share of the step, start-up seconds;
- `impl: trl`: median seconds per step and the share spent in `generate` (TRL 1.16's
  GRPOTrainer has no padding-free option, so it has one mode);
- `comparison`, one per GRPO variant: ours/TRL step-time ratio, median over `--repeats`
  interleaved rounds (goal at size L: <= 0.7 sync, <= 0.6 async), and the weight sync's share
  of our step (goal: <= 2 %); and, with `sync` and `packed`, ours packed vs padded (the
  actor update's time in its rank; goal: >= 30 % saved at 50 % padding).
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
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SIZES, bench_model, default_dtype, require_trl

PHASES = ("generation", "weight_sync", "make_experience", "training", "total")


def job_document(
    args: argparse.Namespace, algorithm: str, async_rollout: bool = False, packed: bool = False
) -> dict[str, Any]:
    samples = args.prompts * args.samples
    return {
        "algorithm": {"name": algorithm, "klCoef": 0.0},
        "models": {
            "actor": {"randomInit": SIZES[args.size]},
            "rewardFunction": {"builtin": "repeat-letter"},
        },
        "data": {"train": [{"builtin": "repeat-letter"}], "labelKey": "label"},
        "rollout": {
            "samplesPerPrompt": args.samples,
            "maxNewTokens": args.new_tokens,
            "temperature": 1.0,
            "engine": args.engine,
            "async": async_rollout,
        },
        "training": {
            "rolloutBatchSize": args.prompts,
            "trainBatchSize": samples,
            "microTrainBatchSize": min(samples, args.micro),
            "microRolloutBatchSize": samples,
            "maxSteps": args.steps,
            "actorLearningRate": 1e-5,
            "criticLearningRate": 1e-5,
            "zeroStage": 0,
            "bf16": args.dtype == "bf16",
            "packingSamples": packed,
        },
        "placement": {
            "device": "cpu",
            "rayResource": "GPU-like",
            # Hybrid engine: weights reach vLLM through the object store, not a broadcast.
            "colocateAll": args.hybrid,
        },
        "checkpoint": {"everySteps": 10**6, "exportHf": False},
        "logging": {"tensorboard": False},
    }


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


VARIANTS = {  # name: (rollout.async, training.packingSamples)
    "sync": (False, False),
    "async": (True, False),
    "packed": (False, True),
    "async-packed": (True, True),
}


def variant_label(algorithm: str, variant: str) -> str:
    return algorithm if variant == "sync" else f"{algorithm}-{variant}"


def run_ours(args: argparse.Namespace, algorithm: str, work: Path, variant: str) -> dict[str, Any]:
    from rlhf_trainer.config import load_document
    from rlhf_trainer.runner.main import run_job

    async_rollout, packed = VARIANTS[variant]
    label = variant_label(algorithm, variant)
    document = job_document(args, algorithm, async_rollout, packed)
    job = load_document(document, f"bench-{label}.yaml", work)
    if job.config is None:
        raise SystemExit("\n".join(job.problems))
    run_dir = work / f"rlhf-{label}"
    start = time.perf_counter()
    run_job(job.config, name=job.name, base_dir=job.base_dir, run_dir=run_dir)
    wall = time.perf_counter() - start
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r.get("event") == "step"]
    # With async the run's last step generates nothing ahead, so it has the cores to itself:
    # not a step of the steady state being measured.
    measured = steps[args.warmup : len(steps) - 1 if async_rollout else None]
    for r in measured:
        # The run's last step also writes the final checkpoint: not part of a step's work.
        r["timings"]["total"] -= r["timings"].get("checkpoint", 0.0)
    phases = {p: median([r["timings"].get(p, 0.0) for r in measured]) for p in PHASES}
    tokens = median([r["metrics"]["generated_tokens"] for r in measured])
    # The actor's update as timed inside its rank (the rest of "training" is transfer/wait).
    in_rank = median([r["metrics"].get("update_s", float("nan")) for r in measured])
    engine = median([r["metrics"].get("rollout_s", float("nan")) for r in measured])
    return {
        "bench": "ppo_step",
        "impl": "rlhf",
        "algorithm": algorithm,
        "async": async_rollout,
        "packing_samples": packed,
        "size": args.size,
        "dtype": args.dtype,
        "prompts": args.prompts,
        "samples_per_prompt": args.samples,
        "max_new_tokens": args.new_tokens,
        "steps_measured": len(measured),
        "step_s": round(phases["total"], 4),
        "phases_s": {k: round(v, 4) for k, v in phases.items()},
        "actor_update_in_rank_s": round(in_rank, 4),
        "engine_generation_s": round(engine, 4),
        "staleness": median([r["metrics"].get("staleness", 0.0) for r in measured]),
        "generated_tokens_per_step": tokens,
        "response_length": median([r["metrics"]["response_length"] for r in measured]),
        "tokens_per_s": round(tokens / phases["total"], 1),
        "generation_tokens_per_s": round(tokens / engine, 1),
        "weight_sync_share": round(phases["weight_sync"] / phases["total"], 4),
        "startup_s": round(wall - sum(r["timings"]["total"] for r in steps), 1),
        "reward_first_last": [steps[0]["metrics"]["reward"], steps[-1]["metrics"]["reward"]],
    }


def run_trl(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    from rlhf_trainer.data.builtin import repeat_letter_prompt, repeat_letter_score
    from rlhf_trainer.models.loading import load_causal_lm

    model_dir, tokenizer = bench_model(args.size)
    model: Any = load_causal_lm(model_dir, dtype=torch.float32)
    rows = [
        {"prompt": [{"role": "user", "content": repeat_letter_prompt(letter)}], "label": letter}
        for letter in "ab" * (args.prompts * (args.steps + 1))
    ]

    def reward(
        prompts: list[Any], completions: list[Any], label: list[str], **_: Any
    ) -> list[float | None]:
        texts = [c[0]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [repeat_letter_score(t, lab) for t, lab in zip(texts, label, strict=True)]

    samples = args.prompts * args.samples
    config = GRPOConfig(
        output_dir=str(work / "trl"),
        use_cpu=True,
        bf16=args.dtype == "bf16",
        per_device_train_batch_size=samples,
        gradient_accumulation_steps=1,
        num_generations=args.samples,
        max_completion_length=args.new_tokens,
        num_iterations=1,
        beta=0.0,
        learning_rate=1e-5,
        temperature=1.0,
        gradient_checkpointing=False,
        max_steps=args.steps,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=42,
        dataloader_num_workers=0,
    )
    step_times: list[float] = []
    generate_times: list[float] = []
    current = {"generate": 0.0, "start": 0.0}

    class Timing(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            current["generate"], current["start"] = 0.0, time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            step_times.append(time.perf_counter() - current["start"])
            generate_times.append(current["generate"])

    original = model.generate

    def timed_generate(*a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            current["generate"] += time.perf_counter() - start

    model.generate = timed_generate
    torch.set_num_threads(os.cpu_count() or 1)
    start = time.perf_counter()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Timing()],
    )
    trainer.train()
    wall = time.perf_counter() - start
    measured = step_times[args.warmup :]
    gen = generate_times[args.warmup :]
    step = median(measured)
    return {
        "bench": "ppo_step",
        "impl": "trl",
        "trl_version": __import__("trl").__version__,
        "algorithm": "grpo",
        "size": args.size,
        "dtype": args.dtype,
        "prompts": args.prompts,
        "samples_per_prompt": args.samples,
        "max_new_tokens": args.new_tokens,
        "steps_measured": len(measured),
        "step_s": round(step, 4),
        "generation_s": round(median(gen), 4),
        "generation_share": round(median(gen) / step, 3) if step else None,
        "startup_s": round(wall - sum(step_times), 1),
        # GRPOTrainer pads every batch; TRL 1.16 offers `padding_free` to SFT and DPO only.
        "padding_free": "not available in TRL 1.16's GRPOTrainer",
    }


def comparison(
    args: argparse.Namespace, rounds: list[dict[str, dict[str, Any]]], label: str, goal: float
) -> dict[str, Any]:
    ratios = [r[label]["step_s"] / r["trl"]["step_s"] for r in rounds]
    return {
        "bench": "ppo_step",
        "comparison": f"{label} rlhf/trl",
        "size": args.size,
        "dtype": args.dtype,
        "rounds": len(rounds),
        "ours_step_s": round(median([r[label]["step_s"] for r in rounds]), 4),
        "trl_step_s": round(median([r["trl"]["step_s"] for r in rounds]), 4),
        "ratio_ours_over_trl": round(median(ratios), 3),
        "ratio_per_round": [round(x, 3) for x in ratios],
        "goal_ratio": goal,
        "weight_sync_share": round(median([r[label]["weight_sync_share"] for r in rounds]), 4),
        "goal_weight_sync_share": 0.02,
    }


def packing_comparison(
    args: argparse.Namespace, rounds: list[dict[str, dict[str, Any]]], algorithm: str
) -> dict[str, Any]:
    """Ours packed vs padded (`training.packingSamples`), same run, same work."""
    padded, packed = ([r[variant_label(algorithm, v)] for r in rounds] for v in ("sync", "packed"))
    in_rank = [
        q["actor_update_in_rank_s"] / p["actor_update_in_rank_s"]
        for p, q in zip(padded, packed, strict=True)
    ]
    return {
        "bench": "ppo_step",
        "comparison": f"{algorithm} packed/padded (ours)",
        "size": args.size,
        "dtype": args.dtype,
        "rounds": len(rounds),
        "training_s": {
            "padded": round(median([p["phases_s"]["training"] for p in padded]), 4),
            "packed": round(median([q["phases_s"]["training"] for q in packed]), 4),
        },
        "actor_update_in_rank_s": {
            "padded": round(median([p["actor_update_in_rank_s"] for p in padded]), 4),
            "packed": round(median([q["actor_update_in_rank_s"] for q in packed]), 4),
        },
        "update_saving": round(1 - median(in_rank), 3),
        "response_length": median([p["response_length"] for p in padded]),
        "max_new_tokens": args.new_tokens,
        "goal_saving_at_half_padding": 0.3,
        "trl": "TRL 1.16's GRPOTrainer has no padding-free option: it always pads",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], help="Default: by CPU flags.")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--micro", type=int, default=32, help="Micro-batch (ours), samples.")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--hybrid", action="store_true", help="Ours: colocate all (hybrid).")
    parser.add_argument("--engine", choices=["vllm", "hf"], default="vllm", help="Ours.")
    parser.add_argument("--algorithms", default="grpo,ppo")
    parser.add_argument(
        "--variants",
        default="sync,async,packed",
        help=f"Ours, side by side, comma-separated, of {', '.join(VARIANTS)}.",
    )
    parser.add_argument("--repeats", type=int, default=1, help="Interleaved rounds.")
    args = parser.parse_args()
    variants = args.variants.split(",")
    if unknown := [v for v in variants if v not in VARIANTS]:
        parser.error(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    if args.steps <= args.warmup + any(VARIANTS[v][0] for v in variants):
        parser.error(
            "--steps must exceed --warmup (by 2 with async: its last step is not measured)"
        )
    why = "as given (--dtype)"
    if args.dtype is None:
        args.dtype, why = default_dtype()
    print(json.dumps({"bench": "ppo_step", "dtype": args.dtype, "why": why}), flush=True)
    if not args.skip_trl:
        require_trl()  # before ours run: a missing TRL should not cost their minutes
    # Back to back, interleaved (ours, TRL, ours, TRL, ...): the machine is noisy, so each
    # round compares the two under the same conditions; the summary takes medians.
    rounds: list[dict[str, dict[str, Any]]] = []
    for round_index in range(args.repeats):
        results: dict[str, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory(prefix="bench-ppo-step-") as tmp:
            work = Path(tmp)
            for algorithm in args.algorithms.split(","):
                for variant in variants:
                    label = variant_label(algorithm, variant)
                    results[label] = run_ours(args, algorithm, work, variant)
                    results[label] |= {"round": round_index}
                    print(json.dumps(results[label]), flush=True)
            if not args.skip_trl:
                results["trl"] = run_trl(args, work) | {"round": round_index}
                print(json.dumps(results["trl"]), flush=True)
        rounds.append(results)
    # Goals at size L (BENCH.md): <= 0.7x TRL without async, <= 0.6x with it.
    goals = {"sync": 0.7, "async": 0.6, "packed": 0.7, "async-packed": 0.6}
    for variant in variants:
        if not args.skip_trl and "grpo" in args.algorithms.split(","):
            label = variant_label("grpo", variant)
            print(json.dumps(comparison(args, rounds, label, goals[variant])), flush=True)
    for algorithm in args.algorithms.split(","):
        if {"sync", "packed"} <= set(variants):
            print(json.dumps(packing_comparison(args, rounds, algorithm)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
