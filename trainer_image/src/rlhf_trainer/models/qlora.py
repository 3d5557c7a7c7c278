"""QLoRA (Dettmers et al. 2023): a frozen base in 4-bit NF4 under trained LoRA adapters.

The base is loaded through the ordinary `from_pretrained` path with a bitsandbytes
`BitsAndBytesConfig` (NF4, double quantisation, computing in the job's dtype), so its linear
layers become `bitsandbytes.nn.Linear4bit`; peft's `prepare_model_for_kbit_training` then keeps
the remaining (unquantised) weights in fp32, and the adapters go on top. What leaves the trainer
(vLLM weight sync, `final/actor`) is never 4-bit: `dequantized` turns a packed NF4 weight back
into a full-precision one, to which the adapters' delta is added as for plain LoRA.

bitsandbytes is imported only when a 4-bit model is loaded or dequantised: the rules
(`config.mode_rules`) say where 4-bit can run without importing it.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch
from torch import Tensor

# What a 4-bit QLoRA needs besides peft and transformers (the trainer extra installs it).
BITSANDBYTES = "bitsandbytes"


class QLoRAUnavailableError(RuntimeError):
    """bitsandbytes is not installed where a 4-bit base must be loaded."""


def require_bitsandbytes() -> None:
    if importlib.util.find_spec(BITSANDBYTES) is None:
        raise QLoRAUnavailableError(
            "training.lora.quantization: 4bit needs the bitsandbytes package, which this "
            "environment lacks: install the trainer extra (pip install 'rlhf-operator[trainer]') "
            "or use the trainer image"
        )


def bnb_config(compute_dtype: torch.dtype) -> Any:
    """NF4 with double quantisation (the QLoRA paper's recipe; OpenRLHF's and TRL's too)."""
    require_bitsandbytes()
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(  # type: ignore[no-untyped-call]
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute_dtype,
    )


def quantized_load_kwargs(compute_dtype: torch.dtype, device: torch.device) -> dict[str, Any]:
    """`from_pretrained` keywords of a 4-bit base: bitsandbytes quantises while it loads, on
    the device the rank trains on (it cannot be moved across devices as a float model is)."""
    index = device.index if device.index is not None else 0
    return {
        "quantization_config": bnb_config(compute_dtype),
        "device_map": {"": index if device.type == "cuda" else device.type},
    }


def prepare_for_kbit(model: Any, *, gradient_checkpointing: bool) -> Any:
    """peft's preparation of a quantised base: the frozen unquantised weights (embeddings,
    norms, head) in fp32, inputs that require grad, and gradient checkpointing if asked."""
    from peft import prepare_model_for_kbit_training

    prepared = prepare_model_for_kbit_training(  # type: ignore[no-untyped-call]
        model,
        use_gradient_checkpointing=gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False},
    )
    if gradient_checkpointing:
        prepared.config.use_cache = False
    keep_cpu_weights_unpacked(prepared)
    return prepared


def keep_cpu_weights_unpacked(model: Any) -> None:
    """Turn off bitsandbytes' CPU inference path on CPUs with AVX-512 bf16: at the first eval
    forward under no_grad (the actor's log-probs) it repacks each 4-bit weight in place into a
    layout for its fused kernel, which computes in bf16 whatever the job's compute dtype is, and
    `dequantize_4bit` on a repacked weight returns wrong values (measured: the export then
    differed from the dequantised base by 0.14 on the tiny model), so weight sync and `final/`
    would carry wrong weights. Unpacked, every CPU dequantises and computes in the job's dtype."""
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False


def is_4bit(param: Tensor) -> bool:
    """A packed bitsandbytes 4-bit weight (`Params4bit` with its quantisation state)."""
    return getattr(param, "quant_state", None) is not None and getattr(
        param, "bnb_quantized", False
    )


def dequantized(param: Tensor) -> Tensor:
    """The full-precision weight of `param` (a 4-bit one dequantised; others as they are)."""
    if not is_4bit(param):
        return param.data
    from bitsandbytes.functional import dequantize_4bit

    weight: Tensor = dequantize_4bit(param.data, param.quant_state)  # type: ignore[attr-defined]
    return weight


def is_quantized_model(model: Any) -> bool:
    return bool(getattr(model, "is_loaded_in_4bit", False)) or any(
        is_4bit(p) for p in model.parameters()
    )


def savable_base(model: Any) -> Any:
    """The model whose `save_pretrained(dir, state_dict=merged)` writes the export: the base
    model itself, or for a 4-bit base a plain one of the same architecture (built on the meta
    device: no memory) whose config has no `quantization_config`, so that the full-precision
    export loads with `from_pretrained` without bitsandbytes."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base.config, "quantization_config", None) is None:
        return base
    import copy

    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(base.config)
    del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    plain.generation_config = copy.deepcopy(base.generation_config)
    return plain
