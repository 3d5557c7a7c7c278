"""A vLLM engine whose requests in flight can be paused for a weight update (partial rollout).

`rollout.partialRollout`: the engine runs vLLM's `AsyncLLM` (its engine core in a process of
its own) as a Ray async actor, so a weight update can arrive while `generate` is waiting on
its requests. `WeightSync` brackets the loads with `pause` and `resume`:

- `pause`: `pause_generation(mode="keep", clear_cache=True)`: the scheduler stops between two
  decode steps and keeps every request; clearing the cache preempts the running ones, so
  their KV blocks, computed by the old weights, are dropped.
- the loads: the same worker-extension calls as `VLLMEngine` (`collective_rpc`).
- `resume`: the weights are labelled with the next version and the scheduler resumes; each
  preempted request is prefilled again (prompt + the tokens it has) by the new weights and
  goes on sampling by them.

Recomputing the cache (as AReaL's interruptible rollout does) costs one prefill per request in
flight, and makes every token's sampling distribution exactly one policy version's: the
behaviour log-prob the engine reports (`processed_logprobs`) is that policy's, and the
importance ratio stays exact. Keeping the old KV (`clear_cache=False`, as some systems do)
would sample the later tokens from a mixture that no version of the policy computes.

vLLM labels each response's tokens by the weight version that sampled them
(`CompletionOutput.weight_versions`), so each sample records the versions it spans.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

from .vllm_engine import (
    EngineSettings,
    Generated,
    SamplingSettings,
    llm_kwargs,
    prepare_process,
    responses,
    sampling_params,
)
from .weights import Packed, TensorMeta

# Ray runs this many of an async actor's calls at once: `generate` and a weight update's
# pause / loads / resume must overlap.
CONCURRENCY = 16


class PausableVLLMEngine:
    """Ray async actor body; the same calls as `VLLMEngine` plus `pause` and `resume`."""

    def __init__(self, settings: EngineSettings) -> None:
        prepare_process(settings)
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**llm_kwargs(settings)))
        self.version = 0  # weight loads so far: the label of the weights now loaded
        self.requests = itertools.count()
        self.paused = False

    async def ping(self) -> int:
        await self.llm.update_weight_version(str(self.version))
        return os.getpid()

    async def generate(
        self, prompts: list[list[int]], seeds: list[int], sampling: SamplingSettings
    ) -> list[list[Generated]]:
        """For each prompt, `sampling.n` responses; a weight update may land in between."""
        from vllm.sampling_params import RequestOutputKind

        def params(seed: int) -> Any:
            return sampling_params(
                sampling,
                seed if sampling.seeded else None,
                output_kind=RequestOutputKind.FINAL_ONLY,
            )

        outputs = await asyncio.gather(
            *(self._one(ids, params(seed)) for ids, seed in zip(prompts, seeds, strict=True))
        )
        return [responses(out) for out in outputs]

    async def _one(self, ids: list[int], params: Any) -> Any:
        final = None
        request_id = f"rlhf-{os.getpid()}-{next(self.requests)}"
        async for out in self.llm.generate({"prompt_token_ids": ids}, params, request_id):
            final = out
        if final is None:
            raise RuntimeError(f"vLLM returned no output for request {request_id}")
        return final

    # --- weight sync ----------------------------------------------------------------------
    async def pause(self) -> bool:
        """Freeze the requests in flight and drop their KV cache (see the module's doc)."""
        await self.llm.pause_generation(mode="keep", clear_cache=True)
        self.paused = True
        return True

    async def resume(self) -> int:
        """Label the weights just loaded as the next version and go on generating."""
        if not self.paused:
            raise RuntimeError("resume without pause: the engine was not paused")
        self.version += 1
        await self.llm.update_weight_version(str(self.version))
        await self.llm.resume_generation()
        self.paused = False
        return self.version

    async def load_packed(self, packed: Packed) -> int:
        """One bucket from the object store; it crosses into the engine-core process as
        plain items (one copy: vLLM's msgpack channel knows neither `TensorMeta` nor how to
        rebuild an untyped numpy array)."""
        self._check_paused()
        items = [(m.name, m.dtype, list(m.shape), raw.tobytes()) for m, raw in packed]
        return int((await self.llm.collective_rpc("rlhf_load_raw", args=(items,)))[0])

    async def init_weight_group(
        self, backend: str, address: str, port: int, first_rank: int, world_size: int
    ) -> bool:
        await self.llm.collective_rpc(
            "rlhf_init_weight_group", args=(backend, address, port, first_rank, world_size)
        )
        return True

    async def receive_weights(self, plan: list[list[TensorMeta]]) -> int:
        self._check_paused()
        plain = [[(m.name, m.dtype, list(m.shape)) for m in metas] for metas in plan]
        return int((await self.llm.collective_rpc("rlhf_receive_weights", args=(plain,)))[0])

    async def reset_prefix_cache(self) -> None:
        # Dropped by `pause` already (clear_cache); nothing cached survives a weight load.
        return None

    def _check_paused(self) -> None:
        # A load while requests run would sample tokens from half-loaded weights.
        if not self.paused:
            raise RuntimeError("weights may be loaded only while the engine is paused")
