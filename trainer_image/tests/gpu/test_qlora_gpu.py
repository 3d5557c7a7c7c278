"""QLoRA on a CUDA GPU (marker `gpu`; skipped where CUDA or bitsandbytes is absent).

Run on a GPU machine: `pytest -m gpu trainer_image/tests/gpu/test_qlora_gpu.py`. It needs
torch, transformers, peft, bitsandbytes and pydantic, and imports only the trainer modules that
load without Ray, DeepSpeed or vLLM: the trainer's own loader puts a tiny random-init Llama on
the GPU with a 4-bit NF4 base computing in bf16, ~30 AdamW steps train the adapters on a fixed
batch, and the trainer's own export (NF4 dequantised, adapters merged) must give the logits of
the QLoRA model it came from.

The same check run by hand on this project's CPU machine (`qlora_check(cpu, bfloat16)`, the
bitsandbytes CPU kernels) measured: loss 6.26 -> 4.08 in 30 steps, export vs QLoRA logits
mean |diff| 0.5% of the mean |logit| (max 0.009), greedy tokens 100% equal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.gpu

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
STEPS = 30


def qlora_check(device: torch.device, compute: torch.dtype, tmp: Path) -> dict[str, Any]:
    """Train a tiny QLoRA model on `device` and compare it with its merged export; returns the
    figures (the GPU test asserts on them; on CPU the same check can be run by hand)."""
    import bitsandbytes as bnb
    from transformers import AutoModelForCausalLM

    from rlhf_trainer.config import LoRAConfig, RandomInit, TrainingConfig
    from rlhf_trainer.distributed.weights import state_dict_for_export
    from rlhf_trainer.models.loading import load_trainable_causal_lm
    from rlhf_trainer.models.qlora import savable_base
    from rlhf_trainer.models.tiny import build_tiny_model

    spec = RandomInit(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=256)
    model_dir = build_tiny_model(spec, tmp / "base")
    training = TrainingConfig.model_validate(
        {
            "bf16": compute is torch.bfloat16,
            "gradientCheckpointing": True,
            "lora": LoRAConfig(rank=16, alpha=32, target_modules=ALL_LINEAR, quantization="4bit"),
        }
    )
    model = load_trainable_causal_lm(model_dir, training, device=device)
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]

    torch.manual_seed(0)
    ids = torch.randint(3, spec.vocab_size, (8, 32), device=device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    losses = []
    for _ in range(STEPS):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))

    model.eval()
    with torch.no_grad():
        qlora_logits = model(input_ids=ids).logits.float()
    merged = state_dict_for_export(model, rank=0, dtype=torch.float32)
    savable_base(model).save_pretrained(tmp / "export", state_dict=merged)
    plain = AutoModelForCausalLM.from_pretrained(tmp / "export", dtype=torch.float32)
    plain = plain.to(device).eval()
    with torch.no_grad():
        plain_logits = plain(input_ids=ids).logits.float()
    diff = (qlora_logits - plain_logits).abs()
    return {
        "layers": len(layers),
        "layer_devices": {str(m.weight.device.type) for m in layers},
        "non_adapter_trainable": [n for n in trainable if "lora_" not in n],
        "losses": losses,
        "max_abs_diff": float(diff.max()),
        "rel_mean_diff": float(diff.mean() / plain_logits.abs().mean()),
        "argmax_agreement": float(
            (qlora_logits.argmax(-1) == plain_logits.argmax(-1)).float().mean()
        ),
        "export_config": (tmp / "export" / "config.json").read_text(),
    }


def test_qlora_trains_on_cuda_and_its_merged_export_matches(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (bitsandbytes' CUDA 4-bit kernels)")
    pytest.importorskip("bitsandbytes", reason="QLoRA needs bitsandbytes (the trainer extra)")
    pytest.importorskip("peft", reason="LoRA needs peft (the trainer extra)")

    out = qlora_check(torch.device("cuda", 0), torch.bfloat16, tmp_path)
    print({k: v for k, v in out.items() if k != "export_config"})
    # 2 layers x 7 linear layers, all quantised and on the GPU; only adapters train.
    assert out["layers"] == 14
    assert out["layer_devices"] == {"cuda"}
    assert out["non_adapter_trainable"] == []
    losses = out["losses"]
    assert sum(losses[-5:]) / 5 < losses[0] - 0.1, losses
    # The export is a plain full-precision model: no bitsandbytes needed to load it.
    assert "quantization_config" not in out["export_config"]
    # The QLoRA model computes in bf16 and the export in fp32: equal up to bf16 rounding.
    assert out["rel_mean_diff"] < 0.02, out
    assert out["argmax_agreement"] >= 0.95, out
