"""Partial rollout's engine (`vllm_pausable`, vLLM's AsyncLLM on the CPU build): requests
paused mid-generation resume after a weight load and go on sampling by the new weights.

The new weights make one token (`TARGET`) the argmax by far: every layer's output projection
is zeroed (the residual stream is the token's embedding), the embedding's first coordinate
is 1 for every token, the final norm keeps only that coordinate and the LM head maps it to
`TARGET` alone. The random-init weights before sample `TARGET` about once in 512 tokens.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from test_weight_sync import (  # noqa: F401  (cluster_factory is a fixture)
    check_sync_after_update,
    cluster_factory,
    job,
)

from rlhf_trainer.config import JobConfig

TARGET = 77
TOKENS_BEFORE_PAUSE = 8


def argmax_weights(model_dir: Path) -> list[tuple[str, torch.Tensor]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    for name, tensor in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            tensor.zero_()
    weights["model.embed_tokens.weight"][:, 0] = 1.0
    weights["model.norm.weight"].zero_()
    weights["model.norm.weight"][0] = 1.0
    weights["lm_head.weight"].zero_()
    weights["lm_head.weight"][TARGET, 0] = 50.0
    return list(weights.items())


async def until_generated(engine: Any, tokens: int, requests: int) -> None:
    """Wait until each of the engine's `requests` requests has sampled `tokens` tokens."""
    states = engine.llm.output_processor.request_states
    for _ in range(6000):
        counts = [s.detokenizer.num_output_tokens() for s in states.values() if s.detokenizer]
        if len(counts) >= requests and min(counts) >= tokens:
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"the engine did not sample {tokens} tokens per request in 60 s")


@pytest.mark.slow
def test_paused_requests_resume_by_the_weights_loaded_while_paused(tiny_model_dir: Path) -> None:
    """Measured: each of the 4 responses (2 prompts x 2, 160 tokens) sampled 9-10 tokens by
    the initial weights (log-probs about -6), then 150-151 tokens, all `TARGET` with log-prob
    0.0, by the loaded ones; vLLM labels the two spans versions 0 and 1."""
    from rlhf_trainer.distributed.vllm_engine import EngineSettings, SamplingSettings
    from rlhf_trainer.distributed.vllm_pausable import PausableVLLMEngine
    from rlhf_trainer.distributed.weights import pack

    settings = EngineSettings(
        model_dir=str(tiny_model_dir),
        dtype="float32",
        seed=0,
        max_model_len=256,
        gpu_memory_utilization=0.5,
        enforce_eager=True,
        on_gpu=False,
        kv_cache_bytes=32 * 2**20,
    )
    engine = PausableVLLMEngine(settings)
    sampling = SamplingSettings(2, 160, 1.0, 1.0, -1, logprobs=True)
    packed = pack(argmax_weights(tiny_model_dir))

    async def scenario() -> tuple[Any, Any]:
        await engine.ping()
        batch = asyncio.create_task(engine.generate([[1, 5, 9, 13], [1, 7, 11]], [1, 2], sampling))
        await until_generated(engine, TOKENS_BEFORE_PAUSE, requests=4)
        await engine.pause()
        assert await engine.load_packed(packed) == len(packed)
        assert await engine.resume() == 1
        responses = await batch
        fresh = await engine.generate([[1, 2]], [3], SamplingSettings(1, 8, 1.0, 1.0, -1))
        return responses, fresh

    try:
        responses, fresh = asyncio.run(scenario())
    finally:
        engine.llm.shutdown()
    spanned = [g for group in responses for g in group if g.weight_versions == (0, 1)]
    for g in spanned:
        tail = len(g.token_ids) - next(
            i for i in range(len(g.token_ids), 0, -1) if g.token_ids[i - 1] != TARGET
        )
        before = len(g.token_ids) - tail
        print(f"{before} tokens by version 0, {tail} by version 1 ({g.finish_reason})")
        assert before >= TOKENS_BEFORE_PAUSE and tail >= 1 and g.finish_reason == "length"
        assert min(g.logprobs[before:]) > -1e-3  # sampled by the new weights' distribution
        assert max(g.logprobs[:before]) < -0.5  # ... and the first tokens by the old ones
    # A random-init response may stop (EOS) before the pause; most go on through it.
    assert len(spanned) >= 3, [g.weight_versions for group in responses for g in group]
    assert fresh[0][0].token_ids == [TARGET] * 8 and fresh[0][0].weight_versions == (1,)


def partial(cfg: JobConfig) -> JobConfig:
    doc = cfg.to_manifest()
    doc["rollout"] |= {"async": True, "partialRollout": True}
    return JobConfig.model_validate(doc)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["broadcast", "object-store"])
def test_pausable_engines_sync_weights_as_ray_actors(
    cluster_factory: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """The cluster with partial rollout: pausable engines as Ray async actors, each weight
    sync bracketed by pause / resume; greedy tokens after it equal HF's on the export."""
    monkeypatch.setenv("RLHF_WEIGHT_SYNC", mode)
    cluster, tokenizer = cluster_factory(partial(job()))
    assert cluster.weight_sync.pausing  # else the engines would have no pause to call
    assert check_sync_after_update(cluster, tokenizer, tmp_path) == mode
