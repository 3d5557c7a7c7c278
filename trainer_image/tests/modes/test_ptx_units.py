"""PPO-ptx: its rules, the pretraining text and the per-step batches (pure parts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from rlhf_trainer.config import DataConfig, JobConfig, validation_messages
from rlhf_trainer.data.pretrain import PretrainBatches, lm_loss, load_pretrain, pad_right
from rlhf_trainer.models.tokenizer import train_tokenizer


def ppo(algorithm: dict[str, Any], data: dict[str, Any]) -> list[str]:
    doc = {
        "algorithm": {"name": "ppo", **algorithm},
        "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
        "data": {"train": [{"builtin": "repeat-letter"}], **data},
        "training": {"rolloutBatchSize": 8, "trainBatchSize": 8, "microTrainBatchSize": 2},
    }
    try:
        JobConfig.model_validate(doc)
    except ValidationError as err:
        return validation_messages(err)
    return []


@pytest.mark.parametrize(
    ("algorithm", "data", "expected"),
    [
        ({"ptxCoef": 0.05}, {"pretrain": [{"builtin": "corpus"}]}, []),
        (
            {"ptxCoef": 0.05},
            {},
            ["data.pretrain: algorithm.ptxCoef > 0 needs pretraining text: add a source"],
        ),
        (
            {},
            {"pretrain": [{"builtin": "corpus"}]},
            [
                "algorithm.ptxCoef: data.pretrain is used only with a ptx coefficient: set "
                "ptxCoef > 0 (e.g. 0.05) or remove data.pretrain"
            ],
        ),
        (
            {"ptxCoef": 0.05},
            {"pretrain": [{"builtin": "gsm8k"}]},
            ["data.pretrain[0].builtin: 'gsm8k' is unknown; available: corpus, repeat-letter"],
        ),
    ],
    ids=["ok", "no-text", "no-coef", "unknown-builtin"],
)
def test_ptx_rules(algorithm: dict[str, Any], data: dict[str, Any], expected: list[str]) -> None:
    assert ppo(algorithm, data) == expected


def test_offline_trainers_refuse_ptx() -> None:
    doc = {
        "algorithm": {"name": "sft", "ptxCoef": 0.1},
        "models": {"actor": {"randomInit": {}}},
        "data": {"train": [{"builtin": "repeat-letter"}], "pretrain": [{"builtin": "corpus"}]},
        "training": {"trainBatchSize": 8, "microTrainBatchSize": 2},
    }
    with pytest.raises(ValidationError) as err:
        JobConfig.model_validate(doc)
    assert validation_messages(err.value) == [
        "algorithm.ptxCoef: the pretraining loss is added to the PPO-family actor update "
        "(PPO-ptx); algorithm sft has none: set it to 0"
    ]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return train_tokenizer(512)


def test_pretraining_batches_are_a_function_of_the_step(tokenizer: Any) -> None:
    cfg = DataConfig.model_validate(
        {"train": [{"builtin": "repeat-letter"}], "pretrain": [{"builtin": "corpus"}]}
    )
    texts = load_pretrain(cfg, tokenizer, Path("."), seed=3)
    assert len(texts) == 88 and all(t[-1] == tokenizer.eos_token_id for t in texts)
    batches = PretrainBatches(texts, rows=32, pad_id=int(tokenizer.pad_token_id))
    third = batches.batch(3)
    assert third["input_ids"].shape[0] == 32
    # Positions 64..95 of the stream: the end of the first pass, then the second pass.
    assert third["input_ids"][0, : len(texts.at(64))].tolist() == texts.at(64)
    assert torch.equal(batches.batch(3)["input_ids"], third["input_ids"])  # resume: same rows


def test_lm_loss_ignores_padding() -> None:
    class Uniform(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, **_: Any) -> Any:
            return type("Out", (), {"logits": torch.zeros(*input_ids.shape, 8)})()

    batch = pad_right([[1, 2, 3], [4, 5]], pad_id=0)
    assert float(lm_loss(Uniform(), batch)) == pytest.approx(float(torch.log(torch.tensor(8.0))))
