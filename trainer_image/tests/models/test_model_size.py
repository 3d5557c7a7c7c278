"""The parameter counts `placement.auto` decides with are the ones transformers builds."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
)

from rlhf_trainer.config import ModelSource, RandomInit
from rlhf_trainer.config.modelsize import (
    config_params,
    format_params,
    name_params,
    parse_size,
    random_init_params,
    source_size,
)


def _built(config: dict[str, Any], *, scoring: bool) -> int:
    hf = AutoConfig.for_model(**config, num_labels=1)
    kind = AutoModelForSequenceClassification if scoring else AutoModelForCausalLM
    with torch.device("meta"):  # shapes only: no memory, no time
        model = kind.from_config(hf)
    return sum(p.numel() for p in model.parameters())


SMALL = {
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 3,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
}
CONFIGS = [
    ("llama-gqa", {"model_type": "llama", **SMALL}),
    (
        "llama-attention-and-mlp-bias",
        {"model_type": "llama", **SMALL, "attention_bias": True, "mlp_bias": True},
    ),
    ("llama-tied", {"model_type": "llama", **SMALL, "tie_word_embeddings": True}),
    ("qwen2-qkv-bias", {"model_type": "qwen2", **SMALL, "tie_word_embeddings": False}),
    ("qwen2-tied", {"model_type": "qwen2", **SMALL, "tie_word_embeddings": True}),
    ("mistral", {"model_type": "mistral", **SMALL, "tie_word_embeddings": False}),
]


@pytest.mark.parametrize("scoring", [False, True], ids=["causal-lm", "scoring"])
@pytest.mark.parametrize("config", [c[1] for c in CONFIGS], ids=[c[0] for c in CONFIGS])
def test_config_json_count_is_exact(config: dict[str, Any], scoring: bool) -> None:
    counted = config_params(config, scoring=scoring)
    assert counted == (_built(config, scoring=scoring), True)


@pytest.mark.parametrize("scoring", [False, True], ids=["causal-lm", "scoring"])
def test_random_init_count_is_exact(scoring: bool) -> None:
    spec = RandomInit(hidden_size=48, num_layers=3, num_heads=4, intermediate_size=96)
    config = {
        "model_type": "llama",
        "hidden_size": 48,
        "intermediate_size": 96,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": spec.vocab_size,
        "tie_word_embeddings": False,
    }
    assert random_init_params(spec, scoring=scoring) == _built(config, scoring=scoring)
    size = source_size(ModelSource(random_init=spec), stated="7B")
    assert size is not None and size.source == "exact, from its randomInit config"


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", 7 * 10**9),
        ("meta-llama/Llama-2-70b-hf", 70 * 10**9),
        ("OpenRLHF/Llama-3-8b-rm-mixture", 8 * 10**9),
        ("Qwen/Qwen2.5-0.5B", 5 * 10**8),
        ("mistralai/Mixtral-8x7B-v0.1", 56 * 10**9),
        ("HuggingFaceTB/SmolLM2-360M", 360 * 10**6),
        ("org/actor", None),
        ("Qwen/Qwen2.5-Math", None),
    ],
)
def test_sizes_in_names(name: str, params: int | None) -> None:
    assert name_params(name) == params


def test_stated_sizes_and_labels() -> None:
    assert parse_size("7B") == 7 * 10**9
    assert parse_size("1.5b") == 1_500_000_000
    assert parse_size("500M") == 500_000_000
    assert parse_size("7615616512") == 7615616512
    assert parse_size("seven") is None
    assert [format_params(n) for n in (7615616512, 494032768, 70553706496)] == [
        "7.6B",
        "494M",
        "70.6B",
    ]
    named = ModelSource(pretrained="Qwen/Qwen2.5-7B")
    stated = source_size(named, stated="8B")
    assert stated is not None and (stated.params, stated.source) == (
        8 * 10**9,
        "placement.modelSize",
    )
    parsed = source_size(named, stated=None)
    assert parsed is not None and parsed.source == "parsed from the name 'Qwen/Qwen2.5-7B'"
