"""bench/'s probes at tiny size: the GPU check script runs on a CPU (its smoke check) and prints
its lines, as does the training-step probe; the floor arithmetic gives the figures worked out
by hand."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


def load(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_gpu_check_runs_tiny_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    gpu_check = load("gpu_check")
    argv = ["--size", "tiny", "--device", "cpu", "--dtype", "fp32", "--samples", "4"]
    argv += ["--micro", "2", "--prompt", "2:6", "--response", "2:8", "--iters", "1"]
    assert gpu_check.main(argv) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    runs = {(x["impl"], x["pass"], x["mode"]) for x in lines if "impl" in x}
    assert runs == {
        ("rlhf", "log_probs", "padded"),
        ("rlhf", "log_probs", "packed"),
        ("rlhf", "update", "padded"),
        ("rlhf", "update", "packed"),
        ("trl", "update", "padded"),
    }
    assert all(x["median_s"] > 0 and x["params"] > 0 for x in lines if "impl" in x)
    comparison = lines[-1]
    assert comparison["comparison"] == "rlhf/trl actor update"
    assert comparison["update_packed_over_trl"] > 0
    assert 0 < lines[0]["padding_share"] < 1


def test_trl_restated_log_probs_match_ours() -> None:
    """The restated TRL step scores the same tokens as our forward (padded layout)."""
    import torch

    gpu_check = load("gpu_check")
    from rlhf_trainer.distributed.forward import action_log_probs

    args = gpu_check.main.__globals__["argparse"].Namespace(
        samples=3, prompt=(2, 5), response=(2, 6), seed=1
    )
    model = gpu_check.build_model("tiny", torch.device("cpu"), torch.float32, 0).eval()
    batch = gpu_check.make_batch(args, 512, torch.device("cpu"))
    with torch.no_grad():
        ours, _ = action_log_probs(model, batch, 1.0)
        trl = gpu_check.trl_log_probs(
            model, batch["input_ids"], batch["attention_mask"], batch["action_mask"].shape[1]
        )
    real = batch["action_mask"] != 0
    torch.testing.assert_close(ours[real], trl[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("dtype", "old_logps", "expected"),
    [
        # 1e6 params, 10 samples x (10 prompt + 20 response) tokens, 1 TFLOP/s, 10 GB/s:
        # decode 20 x max(2e6 B / 1e10, 2e7 flop / 1e12) = 20 x 2e-4; prefill 2e8 / 1e12;
        # training 6e6 x 300 / 1e12 + 28e6 B / 1e10; sync 2 x 2e6 / 1e10.
        ("bf16", True, (4.2e-3, 6e-4, 4.6e-3, 4e-4)),
        ("fp32", False, (8.2e-3, 0.0, 4.6e-3, 8e-4)),
    ],
)
def test_phase_floors(dtype: str, old_logps: bool, expected: tuple[float, ...]) -> None:
    floor = load("floor")
    machine = floor.Machine(bandwidth_gb_s=10.0, matmul_tflop_s=1.0, dtype=dtype)
    work = floor.Work(params=10**6, samples=10, prompt_tokens=10, response_tokens=20)
    got = floor.phase_floors(machine, work, old_logps=old_logps)
    phases = ("generation", "make_experience", "training", "weight_sync")
    assert got == pytest.approx(dict(zip(phases, expected, strict=True)))
    assert floor.multiples({"training": 2 * got["training"]}, got) == {"training": 2.0}


def test_train_step_times_each_phase_by_zero_stage() -> None:
    argv = ["--size", "tiny", "--configs", "0,0-ds,2", "--steps", "1", "--rows", "2"]
    argv += ["--tokens", "8"]
    proc = subprocess.run(
        [sys.executable, str(BENCH / "train_step.py"), *argv, "--dtype", "bf16"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    runs = {x["config"]: x for x in lines if "config" in x}
    # bf16 at stage 0 is ours; `-ds` DeepSpeed's unfused wrapper; stage 2 its ZeRO optimizer.
    assert runs["0"]["optimizer"] == "MasterWeightAdamW"
    assert runs["0-ds"]["optimizer"] == "FP16_UnfusedOptimizer"
    assert runs["2"]["optimizer"] == "DeepSpeedZeroOptimizer"
    for run in runs.values():
        assert set(run["best_s"]) == {"forward", "backward", "step"}
        assert all(v > 0 for v in run["best_s"].values())
