"""Tiny random-initialised Llama models built from a `RandomInit` spec, for CPU runs and tests.

The build is written with `save_pretrained` (weights, config, generation config) and the
tokenizer beside it, so every consumer (HF, DeepSpeed, vLLM) loads it through the ordinary
`from_pretrained` path. Builds are deterministic (same spec -> same weights and tokenizer) and
cached: a directory holding a complete build of the same spec is reused. A build is written to a
temporary sibling directory and renamed into place, so concurrent builders (several Ray actors)
never see half a model; the loser of a race reuses the winner's build.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

import torch
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from rlhf_trainer.config import RandomInit

from .tokenizer import train_tokenizer

ModelKind = Literal["causal-lm", "reward"]
MODEL_KINDS: tuple[ModelKind, ...] = ("causal-lm", "reward")

# Written last: its presence (with the same spec and kind) marks a complete build.
BUILD_MARKER = "rlhf_build.json"
BUILD_FORMAT = 1


def build_record(spec: RandomInit, kind: ModelKind) -> dict[str, object]:
    return {"format": BUILD_FORMAT, "kind": kind, "spec": spec.to_manifest()}


def is_complete_build(out_dir: Path, spec: RandomInit, kind: ModelKind) -> bool:
    marker = out_dir / BUILD_MARKER
    try:
        return bool(json.loads(marker.read_text()) == build_record(spec, kind))
    except (OSError, ValueError):
        return False


def llama_config(spec: RandomInit, *, pad_id: int, bos_id: int, eos_id: int) -> LlamaConfig:
    return LlamaConfig(  # type: ignore[call-arg]  # num_labels/dtype go to PretrainedConfig
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_position_embeddings,
        pad_token_id=pad_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        tie_word_embeddings=False,
        num_labels=1,
        dtype="float32",
    )


def build_tiny_model(spec: RandomInit, out_dir: Path, *, kind: ModelKind = "causal-lm") -> Path:
    """Build (or reuse) a random-init model of `kind` with its tokenizer in `out_dir`.

    `causal-lm` is a `LlamaForCausalLM`; `reward` a `LlamaForSequenceClassification` with one
    label (a scalar score head named `score`, see `rlhf_trainer.models.value`).
    """
    if kind not in MODEL_KINDS:
        raise ValueError(f"kind must be one of {', '.join(MODEL_KINDS)}; got {kind!r}")
    out_dir = Path(out_dir)
    if is_complete_build(out_dir, spec, kind):
        return out_dir
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(
            f"{out_dir} exists and does not hold a complete {kind} build of this randomInit spec;"
            " remove it or choose another directory"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _write_build(spec, kind, tmp)
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above); rename needs the name free
        os.rename(tmp, out_dir)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        # Another process may have won the race with the same build: that is fine.
        if is_complete_build(out_dir, spec, kind):
            return out_dir
        raise
    return out_dir


def _write_build(spec: RandomInit, kind: ModelKind, target: Path) -> None:
    tokenizer = train_tokenizer(spec.vocab_size)
    ids = {name: _token_id(tokenizer, name) for name in ("pad", "bos", "eos")}
    config = llama_config(spec, pad_id=ids["pad"], bos_id=ids["bos"], eos_id=ids["eos"])
    model = _random_model(config, kind, spec.seed)
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"]
    )
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    (target / BUILD_MARKER).write_text(json.dumps(build_record(spec, kind), indent=2) + "\n")


def _token_id(tokenizer: PreTrainedTokenizerFast, name: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(str(getattr(tokenizer, f"{name}_token")))
    if not isinstance(token_id, int):
        raise RuntimeError(f"tokenizer has no single id for its {name} token")
    return token_id


def _random_model(config: LlamaConfig, kind: ModelKind, seed: int) -> PreTrainedModel:
    # Fork the global RNG so building a model inside a training process does not shift its
    # random stream, and so the weights depend on the spec's seed alone.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        cls = LlamaForCausalLM if kind == "causal-lm" else LlamaForSequenceClassification
        model: PreTrainedModel = cls(config)
    model.eval()  # type: ignore[no-untyped-call]
    return model
