"""One RL step, phase by phase, and the same GRPO step through TRL's GRPOTrainer; JSON lines.

    .venv/bin/python bench/ppo_step.py [--size tiny|M|L] [--steps 6] [--warmup 2]
        [--dtype fp32|bf16] [--prompts 8] [--samples 4] [--new-tokens 64] [--repeats 1]
        [--algorithms grpo,ppo] [--async off|on|both] [--skip-trl]

Identical work on both sides (BENCH.md): the same random-init Llama and tokenizer, the same
chat-templated repeat-letter prompts, `--samples` generations of `--new-tokens` tokens per prompt,
one optimizer step over the whole batch per step (one PPO epoch), the same reward function,
no KL term (so neither side runs a reference model), no gradient checkpointing. Ours runs
through `rlhf run`'s code path (Ray placement, DeepSpeed ranks, vLLM engine, weight sync).

Printed, one JSON line each:
- `impl: rlhf, algorithm: grpo` and `algorithm: ppo` (critic + GAE), each with `async` off
  and/or on (`rollout.async`): median seconds per phase over the measured steps (generation,
  weight_sync, make_experience, training, total; with async, generation is only the wait for
  a batch generated during the previous step, and `engine_generation_s` the engines' own
  time), generated tokens/s, weight sync as a share of the step, start-up seconds;
- `impl: trl`: median seconds per step and the share spent in `generate`;
- `comparison`, one per GRPO mode: ours/TRL step-time ratio, median over `--repeats`
  interleaved rounds (goal at size L: <= 0.7 sync, <= 0.6 async), and the weight sync's share
  of our step (goal: <= 2 %).
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

SIZES: dict[str, dict[str, int]] = {
    "tiny": {},  # RandomInit defaults: hidden 64, 2 layers, vocab 512
    "M": {
        "hiddenSize": 512,
        "numLayers": 8,
        "numHeads": 8,
        "intermediateSize": 2048,
        "vocabSize": 4096,
    },
    "L": {
        "hiddenSize": 768,
        "numLayers": 12,
        "numHeads": 12,
        "intermediateSize": 2048,
        "vocabSize": 4096,
    },
}
PHASES = ("generation", "weight_sync", "make_experience", "training", "total")


def job_document(
    args: argparse.Namespace, algorithm: str, async_rollout: bool = False
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


def run_ours(
    args: argparse.Namespace, algorithm: str, work: Path, async_rollout: bool = False
) -> dict[str, Any]:
    from rlhf_trainer.config import load_document
    from rlhf_trainer.runner.main import run_job

    label = f"{algorithm}-async" if async_rollout else algorithm
    document = job_document(args, algorithm, async_rollout)
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

    from rlhf_trainer.config import ModelSource, RandomInit
    from rlhf_trainer.data.builtin import repeat_letter_prompt, repeat_letter_score
    from rlhf_trainer.models.loading import (
        load_causal_lm,
        load_tokenizer,
        model_cache_dir,
        resolve_model_dir,
    )

    spec = RandomInit.model_validate(SIZES[args.size])
    model_dir = resolve_model_dir(ModelSource(random_init=spec), model_cache_dir())
    tokenizer = load_tokenizer(model_dir)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--micro", type=int, default=32, help="Micro-batch (ours), samples.")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--hybrid", action="store_true", help="Ours: colocate all (hybrid).")
    parser.add_argument("--engine", choices=["vllm", "hf"], default="vllm", help="Ours.")
    parser.add_argument("--algorithms", default="grpo,ppo")
    parser.add_argument(
        "--async",
        dest="async_modes",
        choices=["off", "on", "both"],
        default="off",
        help="Ours: rollout.async off, on, or both side by side.",
    )
    parser.add_argument("--repeats", type=int, default=1, help="Interleaved rounds.")
    args = parser.parse_args()
    if args.steps <= args.warmup + (args.async_modes != "off"):
        parser.error(
            "--steps must exceed --warmup (by 2 with --async: the last step is not measured)"
        )
    # Back to back, interleaved (ours, TRL, ours, TRL, ...): the machine is noisy, so each
    # round compares the two under the same conditions; the summary takes medians.
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.async_modes]
    rounds: list[dict[str, dict[str, Any]]] = []
    for round_index in range(args.repeats):
        results: dict[str, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory(prefix="bench-ppo-step-") as tmp:
            work = Path(tmp)
            for algorithm in args.algorithms.split(","):
                for async_rollout in modes:
                    label = f"{algorithm}-async" if async_rollout else algorithm
                    results[label] = run_ours(args, algorithm, work, async_rollout)
                    results[label] |= {"round": round_index}
                    print(json.dumps(results[label]), flush=True)
            if not args.skip_trl:
                results["trl"] = run_trl(args, work) | {"round": round_index}
                print(json.dumps(results["trl"]), flush=True)
        rounds.append(results)
    for label, goal in (("grpo", 0.7), ("grpo-async", 0.6)):
        if not args.skip_trl and label in rounds[0]:
            print(json.dumps(comparison(args, rounds, label, goal)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
