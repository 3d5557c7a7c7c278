"""Pure parts of the distributed layer: DeepSpeed configs, weight naming and packing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from rlhf_trainer.config import TrainingConfig
from rlhf_trainer.distributed.cluster import eager_engine, kv_cache_bytes
from rlhf_trainer.distributed.strategy import (
    eval_config,
    gradient_accumulation,
    init_eval_engine,
    skip_lone_allreduce,
    total_optimizer_steps,
    train_config,
)
from rlhf_trainer.distributed.weights import (
    buckets,
    checkpoint_name,
    flatten,
    iter_weights,
    pack,
    unflatten,
    unpack,
)


def training(**kw: Any) -> TrainingConfig:
    return TrainingConfig.model_validate(
        {"trainBatchSize": 32, "microTrainBatchSize": 4, "microRolloutBatchSize": 8, **kw}
    )


@pytest.mark.parametrize(
    ("kw", "ranks", "on_gpu", "expected"),
    [
        pytest.param(
            {}, 1, False, {"accumulation": 8, "stage": 2, "offload": False}, id="one-rank"
        ),
        pytest.param(
            {}, 2, False, {"accumulation": 4, "stage": 2, "offload": False}, id="two-ranks"
        ),
        pytest.param(
            {"zeroStage": 3, "adamOffload": True},
            2,
            True,
            {"accumulation": 4, "stage": 3, "offload": True},
            id="zero3-offload-gpu",
        ),
        pytest.param(
            {"zeroStage": 3, "adamOffload": True},
            2,
            False,
            {"accumulation": 4, "stage": 3, "offload": False},
            id="offload-is-moot-on-cpu",
        ),
    ],
)
def test_train_config(
    kw: dict[str, Any], ranks: int, on_gpu: bool, expected: dict[str, Any]
) -> None:
    cfg = train_config(training(**kw), ranks, on_gpu=on_gpu)
    assert cfg["gradient_accumulation_steps"] == expected["accumulation"]
    assert cfg["train_batch_size"] == 32
    assert cfg["zero_optimization"]["stage"] == expected["stage"]
    assert ("offload_optimizer" in cfg["zero_optimization"]) is expected["offload"]
    assert cfg["bf16"]["enabled"] is True and cfg["gradient_clipping"] == 1.0
    # A torch optimizer instance is always passed in: no JIT-built DeepSpeed optimizer.
    assert "optimizer" not in cfg


@pytest.mark.parametrize("on_gpu", [False, True])
def test_zero0_leaves_clipping_to_our_optimizers(on_gpu: bool) -> None:
    from rlhf_trainer.distributed.clipped_adamw import ClippedAdamW
    from rlhf_trainer.distributed.master_adamw import MasterWeightAdamW
    from rlhf_trainer.distributed.strategy import build_optimizer

    t = training(zeroStage=0, weightDecay=0.01)
    cfg = train_config(t, 2, on_gpu=on_gpu)
    assert cfg["bf16"] == {"enabled": False} and cfg["gradient_clipping"] == 0.0
    assert cfg["communication_data_type"] == "bf16"
    model = torch.nn.Linear(4, 3)
    optimizer = build_optimizer(model, t, 1e-3, on_gpu=on_gpu)
    assert isinstance(optimizer, MasterWeightAdamW) and optimizer.max_grad_norm == 1.0
    assert model.weight.dtype is torch.bfloat16
    assert optimizer.param_groups[0]["betas"] == t.adam_betas
    assert optimizer.param_groups[0]["weight_decay"] == 0.01
    # fp32 at stage 0: torch's fused AdamW clipping itself, DeepSpeed's clipping off.
    fp32 = training(zeroStage=0, bf16=False)
    fp32_cfg = train_config(fp32, 2, on_gpu=on_gpu)
    assert fp32_cfg["gradient_clipping"] == 0.0 and fp32_cfg["bf16"] == {"enabled": False}
    assert "communication_data_type" not in fp32_cfg
    clipped = build_optimizer(torch.nn.Linear(4, 3), fp32, 1e-3, on_gpu=on_gpu)
    assert isinstance(clipped, ClippedAdamW) and clipped.max_grad_norm == 1.0
    # ZeRO stages 1-3 and Adam offload on GPUs keep DeepSpeed's own paths.
    assert train_config(training(zeroStage=1), 2, on_gpu=on_gpu)["gradient_clipping"] == 1.0
    offload = training(zeroStage=0, adamOffload=True)
    assert train_config(offload, 2, on_gpu=True)["bf16"]["enabled"] is True
    assert train_config(offload, 2, on_gpu=False)["bf16"]["enabled"] is False


def test_frozen_models_are_sharded_only_with_zero3() -> None:
    assert eval_config(training(), 2)["zero_optimization"]["stage"] == 0
    assert eval_config(training(zeroStage=3), 2)["zero_optimization"]["stage"] == 3


@pytest.mark.parametrize(
    ("world_size", "zero", "skipped"), [(1, False, True), (2, False, False), (1, True, False)]
)
def test_the_all_reduce_is_skipped_only_for_one_rank_at_stage_0(
    world_size: int, zero: bool, skipped: bool
) -> None:
    # The flag DeepSpeed's engine reads; a real engine at one rank, stage 0: test_master_adamw.
    class Engine:
        enable_backward_allreduce = True

        def zero_optimization(self) -> bool:
            return zero

    engine = Engine()
    skip_lone_allreduce(engine, world_size)
    assert engine.enable_backward_allreduce is not skipped


def test_gradient_accumulation_must_divide() -> None:
    with pytest.raises(ValueError, match="divisible by microTrainBatchSize x ranks"):
        gradient_accumulation(30, 4, 2)


def test_total_optimizer_steps() -> None:
    # 10 steps x (64 samples / 32 per optimizer step) x 2 epochs.
    assert total_optimizer_steps(10, 64, 32, 2) == 40


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight"),
        (
            "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ),
        ("base_model.model.lm_head.weight", "lm_head.weight"),
    ],
)
def test_checkpoint_names_drop_peft_wrapping(name: str, expected: str) -> None:
    assert checkpoint_name(name) == expected


def test_buckets_split_by_size_and_dtype_and_round_trip() -> None:
    tensors = [
        ("a", torch.arange(6, dtype=torch.float32).reshape(2, 3)),
        ("b", torch.ones(4, dtype=torch.float32)),
        ("c", torch.zeros(2, dtype=torch.bfloat16)),
        ("d", torch.full((8,), 2.0)),
    ]
    grouped = list(buckets(iter(tensors), limit=40))
    assert [[n for n, _ in b] for b in grouped] == [["a", "b"], ["c"], ["d"]]
    for bucket in grouped:
        flat, metas = flatten(bucket)
        for (name, original), (name2, restored) in zip(bucket, unflatten(flat, metas), strict=True):
            assert name == name2 and torch.equal(original, restored)
        for (name, original), (name2, restored) in zip(bucket, unpack(pack(bucket)), strict=True):
            assert name == name2 and restored.dtype == original.dtype
            assert torch.equal(original, restored)


def test_lora_weights_are_sent_merged() -> None:
    from peft import LoraConfig, get_peft_model

    base = torch.nn.Sequential()
    base.add_module("proj", torch.nn.Linear(4, 3, bias=False))
    model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["proj"]))
    lora = model.base_model.model.proj
    with torch.no_grad():
        lora.lora_B["default"].weight.fill_(0.5)
    expected = lora.base_layer.weight + lora.get_delta_weight("default")
    weights = dict(iter_weights(model, rank=0, dtype=torch.float32))
    assert list(weights) == ["proj.weight"]
    assert torch.allclose(weights["proj.weight"], expected)
    assert not torch.allclose(expected, lora.base_layer.weight)


def test_kv_cache_is_sized_from_the_model(tmp_path: Path) -> None:
    config = {"num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768}
    (tmp_path / "config.json").write_text(json.dumps(config))
    per_token = 2 * 12 * 768 * 2  # K and V x 12 layers x 768 x 2 bytes = 36 KiB
    # Whole 128-token blocks: 32 sequences of 76 tokens take a block each (plus vLLM's one
    # held back), x 1.5 headroom; of 200 tokens, two blocks each.
    assert kv_cache_bytes(str(tmp_path), 32, 76, 2) == int(per_token * 33 * 128 * 1.5)
    assert kv_cache_bytes(str(tmp_path), 32, 200, 2) == int(per_token * 65 * 128 * 1.5)
    assert kv_cache_bytes(str(tmp_path), 1, 8, 2) == 32 * 2**20


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_a_frozen_model_without_zero3_is_placed_on_its_ranks_device(stage: int) -> None:
    """Below ZeRO-3 no DeepSpeed engine wraps a frozen model (reference, reward, teacher), so
    the model itself must move to the rank's device: on a GPU rank it stayed on the CPU while
    its inputs went to cuda:0. The meta device stands in for the GPU here."""
    model = init_eval_engine(
        torch.nn.Linear(4, 2), training(zeroStage=stage), 1, torch.device("meta")
    )
    assert all(p.device.type == "meta" and not p.requires_grad for p in model.parameters())
    assert not model.training


def test_the_optimizer_is_fused_adamw_and_steps_like_the_reference() -> None:
    """The fused kernel makes the same AdamW update as the per-tensor loop (to rounding)."""
    from rlhf_trainer.distributed.strategy import build_optimizer

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    reference.load_state_dict(model.state_dict())
    t = training(weightDecay=0.01)
    fused = build_optimizer(model, t, 1e-2, on_gpu=False)
    assert fused.defaults["fused"] is True
    loop = torch.optim.AdamW(
        reference.parameters(), lr=1e-2, betas=t.adam_betas, weight_decay=0.01, foreach=False
    )
    x = torch.randn(5, 8)
    for _ in range(3):
        for net, opt in ((model, fused), (reference, loop)):
            opt.zero_grad()
            net(x).square().sum().backward()
            opt.step()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_the_engine_is_eager_on_cpus_and_graphed_on_gpus_unless_the_job_says() -> None:
    assert eager_engine(None, on_gpu=False) and not eager_engine(None, on_gpu=True)
    assert not eager_engine(False, on_gpu=False)  # compiled on CPU: long runs
    assert eager_engine(True, on_gpu=True)
