"""What the benchmarks share: model sizes, the benchmark model, the dtype for this CPU, and
the overlay directory that holds TRL (`make bench-deps`, see bench/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

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

# Where `make bench-deps` (scripts/bench-deps.sh) installs TRL and what it needs beyond the venv.
OVERLAY = Path(
    os.environ.get("BENCH_SITE", Path.home() / ".cache" / "rlhf-operator" / "bench-site")
)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def bench_model(size: str) -> tuple[str, Any]:
    """The random-init Llama of `size` (built once into the model cache, as a job's
    `randomInit` is) and its tokenizer: the same files the trainer loads."""
    from rlhf_trainer.config import ModelSource, RandomInit
    from rlhf_trainer.models.loading import load_tokenizer, model_cache_dir, resolve_model_dir

    spec = RandomInit.model_validate(SIZES[size])
    model_dir = resolve_model_dir(ModelSource(random_init=spec), model_cache_dir())
    return model_dir, load_tokenizer(model_dir)


def cpu_flags(cpuinfo: str) -> set[str]:
    return {f for line in cpuinfo.splitlines() if line.startswith("flags") for f in line.split()}


def default_dtype(cpuinfo_path: str = "/proc/cpuinfo") -> tuple[str, str]:
    """bf16 where the CPU computes it natively (AVX-512 bf16 or AMX), else fp32: without them
    bf16 matmuls are emulated, ~60x slower than fp32, and would measure the emulation.
    Returns (dtype, why)."""
    try:
        flags = cpu_flags(Path(cpuinfo_path).read_text())
    except OSError:
        return "fp32", f"{cpuinfo_path} unreadable: assuming no native bf16"
    found = [f for f in BF16_FLAGS if f in flags]
    if found:
        return "bf16", f"CPU has {', '.join(found)}: native bf16 matmuls"
    return "fp32", f"CPU lacks {' and '.join(BF16_FLAGS)}: bf16 would be emulated (~60x slower)"


def use_overlay() -> None:
    """Make the overlay's packages importable, after the venv's: it never shadows them."""
    if OVERLAY.is_dir() and str(OVERLAY) not in sys.path:
        sys.path.append(str(OVERLAY))


def require_trl() -> None:
    """Stop with what to run when TRL (or what it needs) is missing."""
    use_overlay()
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError as err:
        raise SystemExit(
            f"the TRL side needs trl==1.16.0 and datasets ({err}); install them beside the venv "
            f"with `make bench-deps` (into {OVERLAY}, see bench/README.md), or pass --skip-trl"
        ) from err


RESULT_PREFIX = "RESULT "


def child_main(args: Any, bench: str, child: Callable[..., dict[str, Any]]) -> bool:
    """The per-configuration half of `run_child`: `--dtype` resolved by the CPU flags when not
    given (the parent prints which and why, once), and with `--child` this process's one
    configuration run and printed as the line `run_child` reads. True when it was a child."""
    if args.dtype is None:
        args.dtype, why = default_dtype()
        if not args.child:
            print(json.dumps({"bench": bench, "dtype": args.dtype, "why": why}), flush=True)
    if not args.child:
        return False
    print(RESULT_PREFIX + json.dumps(child(args, args.child)), flush=True)
    return True


def run_child(script: str, child: str) -> dict[str, Any]:
    """`script` run again with this process's arguments and `--child CHILD`, in a fresh process
    (so no configuration's start-up or threads overlap another's): the JSON it prints after
    `RESULT `; its stderr's tail and an exit where it fails."""
    cmd = [sys.executable, script, *sys.argv[1:], "--child", child]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [x for x in proc.stdout.splitlines() if x.startswith(RESULT_PREFIX)]
    if proc.returncode or not lines:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"--child {child} failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix(RESULT_PREFIX))
    return result
