"""How a tensor-parallel vLLM engine starts its ranks, on GPUs and CPUs (pure)."""

from __future__ import annotations

import pytest

from rlhf_trainer.distributed.engine_parallel import (
    cpu_bind,
    engine_environment,
    executor_backend,
)


@pytest.mark.parametrize(
    ("tp", "on_gpu", "backend"),
    [(1, True, None), (1, False, None), (2, True, "ray"), (4, False, "mp")],
    ids=["gpu-tp1", "cpu-tp1", "gpu-tp2", "cpu-tp4"],
)
def test_executor_backend(tp: int, on_gpu: bool, backend: str | None) -> None:
    assert executor_backend(tp, on_gpu=on_gpu) == backend


@pytest.mark.parametrize(
    ("cpus", "tp", "bind"),
    [
        ([0, 1], 2, "0|1"),
        ([3, 2, 1, 0], 2, "0,1|2,3"),
        ([0, 1, 2, 3, 4], 2, "0,1|2,3"),  # the odd core is left to the others
        ([4, 5, 6, 7, 8, 9, 10, 11], 4, "4,5|6,7|8,9|10,11"),
    ],
)
def test_cpu_bind_splits_the_cores_evenly(cpus: list[int], tp: int, bind: str) -> None:
    assert cpu_bind(cpus, tp) == bind


def test_cpu_bind_refuses_fewer_cores_than_ranks() -> None:
    with pytest.raises(ValueError, match="its 4 ranks to its own cores, but this process may use"):
        cpu_bind([0, 1], 4)


def test_engine_environment() -> None:
    assert engine_environment(1, on_gpu=True, device_share=1.0, cpus=[0], current={}) == {}
    gpu = engine_environment(2, on_gpu=True, device_share=0.25, cpus=[0, 1], current={})
    assert gpu["VLLM_RAY_BUNDLE_INDICES"] == "0,1"
    assert gpu["VLLM_RAY_PER_WORKER_GPUS"] == "0.25"
    assert gpu["CUDA_VISIBLE_DEVICES"] is None  # unset: vLLM's workers find their own GPU
    cpu = engine_environment(2, on_gpu=False, device_share=1.0, cpus=[0, 1], current={})
    assert cpu == {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    # An operator's own binding wins.
    chosen = engine_environment(
        2, on_gpu=False, device_share=1.0, cpus=[0, 1], current={"VLLM_CPU_OMP_THREADS_BIND": "1|0"}
    )
    assert chosen == {}
