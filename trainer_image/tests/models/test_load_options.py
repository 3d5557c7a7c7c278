"""`models.*.revision` and `trustRemoteCode`, and `training.attnImplementation`, reach every
`from_pretrained` (models and tokenizers of each role) and the vLLM engines' `LLM(...)`."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from rlhf_trainer.config import (
    AttnImplementation,
    JobConfig,
    ModelSource,
    RandomInit,
    TrainingConfig,
)
from rlhf_trainer.distributed.plan import ACTOR, CRITIC, REFERENCE, ROLLOUT, role_source
from rlhf_trainer.distributed.vllm_engine import EngineSettings, llm_kwargs
from rlhf_trainer.models import loading
from rlhf_trainer.models.loading import (
    LoadOptions,
    attention_kernel,
    load_causal_lm,
    load_tokenizer,
    load_trainable_causal_lm,
    load_value_model,
)


class Called(Exception):
    """Raised by the spies: the loader got this far, with these arguments."""

    def __init__(self, path: str, kwargs: dict[str, Any]) -> None:
        super().__init__(path)
        self.path, self.kwargs = path, kwargs


def spy(path: str, **kwargs: Any) -> Any:
    raise Called(path, kwargs)


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AutoModelForCausalLM", "AutoModelForSequenceClassification", "AutoTokenizer"):
        monkeypatch.setattr(getattr(loading, name), "from_pretrained", spy)


OPTIONS = LoadOptions(revision="v1.2", trust_remote_code=True, attn_implementation="eager")


@pytest.mark.parametrize(
    ("load", "attention"),
    [
        pytest.param(lambda: load_causal_lm("org/m", options=OPTIONS), True, id="causal-lm"),
        pytest.param(
            lambda: load_trainable_causal_lm("org/m", TrainingConfig(), OPTIONS),
            True,
            id="trainable-causal-lm",
        ),
        pytest.param(lambda: load_value_model("org/m", options=OPTIONS), True, id="value-model"),
        pytest.param(lambda: load_tokenizer("org/m", OPTIONS), False, id="tokenizer"),
    ],
)
def test_options_reach_from_pretrained(spies: None, load: Any, attention: bool) -> None:
    with pytest.raises(Called) as called:
        load()
    assert called.value.path == "org/m"
    kwargs = called.value.kwargs
    assert kwargs["revision"] == "v1.2" and kwargs["trust_remote_code"] is True
    assert kwargs.get("attn_implementation") == ("eager" if attention else None)


JOB: dict[str, Any] = {
    "algorithm": {"name": "ppo"},
    "models": {
        "actor": {"pretrained": "org/actor", "revision": "a1", "trustRemoteCode": True},
        "reference": {"pretrained": "org/ref", "revision": "r1"},
        "rewardModels": [{"pretrained": "org/rm", "revision": "rm1", "trustRemoteCode": True}],
    },
    "data": {"train": [{"path": "p.jsonl"}]},
}


@pytest.mark.parametrize(
    ("role", "revision", "remote"),
    [
        (ACTOR, "a1", True),
        (ROLLOUT, "a1", True),
        (REFERENCE, "r1", False),
        (CRITIC, "rm1", True),  # default critic: the first reward model
        ("reward0", "rm1", True),
    ],
)
def test_each_role_loads_its_own_source(role: str, revision: str, remote: bool) -> None:
    options = LoadOptions.of(role_source(JobConfig.model_validate(JOB), role), "sdpa")
    assert options == LoadOptions(revision, remote, "sdpa")


def test_random_init_sources_ignore_the_revision() -> None:
    source = ModelSource(random_init=RandomInit(), revision="main")
    assert LoadOptions.of(source).revision is None


def test_engines_get_the_actors_revision_and_remote_code() -> None:
    settings = EngineSettings(
        model_dir="org/actor",
        dtype="bfloat16",
        seed=0,
        max_model_len=64,
        gpu_memory_utilization=0.5,
        enforce_eager=True,
        on_gpu=True,
        revision="a1",
        trust_remote_code=True,
    )
    kwargs = llm_kwargs(settings)
    assert kwargs["revision"] == kwargs["tokenizer_revision"] == "a1"
    assert kwargs["trust_remote_code"] is True and kwargs["model"] == "org/actor"


@pytest.mark.parametrize(
    ("choice", "on_gpu", "expected"),
    [
        (AttnImplementation.AUTO, False, "rlhf_cpu_auto"),
        (AttnImplementation.EAGER, False, "eager"),
        (AttnImplementation.SDPA, True, "sdpa"),
        (AttnImplementation.FLASH_ATTENTION_2, True, "flash_attention_2"),
    ],
)
def test_attention_kernel(choice: AttnImplementation, on_gpu: bool, expected: str) -> None:
    assert attention_kernel(choice, on_gpu=on_gpu) == expected


def test_auto_takes_flash_attention_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert attention_kernel(AttnImplementation.AUTO, on_gpu=True) == "flash_attention_2"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert attention_kernel(AttnImplementation.AUTO, on_gpu=True) == "sdpa"


def test_auto_packs_with_flex_attention_on_gpus_without_flash_attn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sdpa computes a packed row's whole square (slower than padding on an H200); FlexAttention
    skips the blocks between sequences. FlashAttention-2 stays first where it is installed; CPUs
    take `models.attention` (FlexAttention compiles for minutes there)."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    auto = AttnImplementation.AUTO
    assert attention_kernel(auto, on_gpu=True, packed=True) == "flex_attention"
    assert attention_kernel(auto, on_gpu=False, packed=True) == "rlhf_cpu_auto"
    assert attention_kernel(AttnImplementation.SDPA, on_gpu=True, packed=True) == "sdpa"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert attention_kernel(auto, on_gpu=True, packed=True) == "flash_attention_2"


def test_a_local_model_loads_with_the_chosen_kernel(tiny_model_dir: Path) -> None:
    model = load_causal_lm(tiny_model_dir, options=LoadOptions(attn_implementation="eager"))
    assert model.config._attn_implementation == "eager"
