"""Shared fixtures for the trainer tests: tiny random-init models built once per session.

Keep this file additive: several test packages (models, data, rewards, distributed, loop) use it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlhf_trainer.config import RandomInit

# Nothing can be downloaded here: fail fast on a Hub id instead of retrying for a minute.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_spec() -> RandomInit:
    """The default `RandomInit` spec: Llama, hidden 64, 2 layers, 2 heads, vocab 512."""
    return RandomInit()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, tiny_spec: RandomInit) -> Path:
    """A tiny random-init `LlamaForCausalLM` + tokenizer, saved with `save_pretrained`."""
    from rlhf_trainer.models.tiny import build_tiny_model

    return build_tiny_model(tiny_spec, tmp_path_factory.mktemp("tiny") / "causal-lm")


@pytest.fixture(scope="session")
def tiny_reward_model_dir(tmp_path_factory: pytest.TempPathFactory, tiny_spec: RandomInit) -> Path:
    """A tiny random-init `LlamaForSequenceClassification` (num_labels=1) + tokenizer."""
    from rlhf_trainer.models.tiny import build_tiny_model

    return build_tiny_model(tiny_spec, tmp_path_factory.mktemp("tiny") / "reward", kind="reward")
