"""Process reward models: the loss at step positions, step-score aggregation, step encoding,
the batch layout and the refusal of per-step rewards."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from rlhf_trainer.algos.prm import aggregate_step_scores, prm_loss, step_margins
from rlhf_trainer.config import JobConfig, validation_messages
from rlhf_trainer.config.steps import StepTokens
from rlhf_trainer.data.offline import PRMItem, load_prm
from rlhf_trainer.data.steps import StepIds, StepTokenError, encode_steps, split_steps, step_ids
from rlhf_trainer.models.tokenizer import train_tokenizer
from rlhf_trainer.objectives.collate import collate
from rlhf_trainer.objectives.kinds import offline_spec
from rlhf_trainer.rewards.process import process_batch, process_rewards


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return train_tokenizer(512)


def prm_job(**data: Any) -> JobConfig:
    return JobConfig.model_validate(
        {
            "algorithm": {"name": "prm"},
            "models": {"actor": {"randomInit": {}}},
            "data": {"train": [{"builtin": "repeat-letter:abcd"}], "maxLength": 64, **data},
            "training": {"trainBatchSize": 8, "microTrainBatchSize": 2},
        }
    )


def test_prm_loss_is_binary_cross_entropy_at_the_steps_only() -> None:
    margins = torch.tensor([[0.0, 2.0, 5.0, -1.0]], requires_grad=True)
    labels = torch.tensor([[-1, 1, -1, 0]])
    loss, stats = prm_loss(margins, labels)
    expected = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-1.0))) / 2
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)
    assert float(stats["accuracy"]) == 1.0
    loss.backward()
    assert margins.grad is not None
    assert margins.grad[0, 0] == 0 and margins.grad[0, 2] == 0  # not a step: no gradient


def test_prm_loss_needs_a_step() -> None:
    with pytest.raises(ValueError, match="at least one labelled step"):
        prm_loss(torch.zeros(1, 3), torch.full((1, 3), -1))


def test_step_margins_are_the_label_tokens_logit_difference() -> None:
    logits = torch.zeros(1, 2, 5)
    logits[0, 1, 3], logits[0, 1, 4] = 2.0, -1.0
    assert step_margins(logits, 3, 4).tolist() == [[0.0, 3.0]]


@pytest.mark.parametrize(
    ("how", "expected"), [("min", [0.2, 0.0]), ("last", [0.6, 0.0]), ("mean", [0.5, 0.0])]
)
def test_aggregate_step_scores(how: str, expected: list[float]) -> None:
    scores = torch.tensor([[0.9, 0.7, 0.2, 0.6, 0.1], [0.5, 0.5, 0.5, 0.5, 0.5]])
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 0, 0, 0]])  # row 2 has no step: 0
    assert aggregate_step_scores(scores, mask, how).tolist() == pytest.approx(expected)


def test_steps_are_encoded_one_by_one_with_the_separator_after_each(tokenizer: Any) -> None:
    ids = step_ids(tokenizer, StepTokens(), "algorithm.prm")
    encoded, positions = encode_steps(tokenizer, ["a", "b b"], ids)
    assert [encoded[p] for p in positions] == [ids.separator[-1]] * 2
    assert positions[-1] == len(encoded) - 1
    assert split_steps("a\nb b\n\n", "\n") == ["a", "b b"]


def test_label_tokens_must_be_single_tokens(tokenizer: Any) -> None:
    with pytest.raises(StepTokenError, match=r"algorithm.prm.positive: 'good step' must be a"):
        step_ids(tokenizer, StepTokens(positive="good step"), "algorithm.prm")


def test_prm_batches_label_only_the_separator_tokens(tokenizer: Any) -> None:
    job = prm_job()
    items = list(load_prm(job.data, tokenizer, Path("."), 0, job.algorithm.prm))[:4]
    batch = collate(items, offline_spec(job), int(tokenizer.pad_token_id), 64)
    labels = batch["step_labels"][:, 0]
    sep = step_ids(tokenizer, job.algorithm.prm, "algorithm.prm").separator[-1]
    for b, item in enumerate(items):
        assert isinstance(item, PRMItem) and len(item.labels) == 4
        where = (labels[b] >= 0).nonzero().flatten().tolist()
        assert [int(batch["input_ids"][b, 0, w]) for w in where] == [sep] * 4
        assert labels[b, where].tolist() == [int(x) for x in item.labels]


def test_held_out_split_differs_from_the_training_rows(tokenizer: Any) -> None:
    job = prm_job(shuffle=False)
    train = list(load_prm(job.data, tokenizer, Path("."), 0, job.algorithm.prm))
    held = list(load_prm(job.data, tokenizer, Path("."), 0, job.algorithm.prm, split="test"))
    assert len(held) == 64 and [i.labels for i in held] != [i.labels for i in train[:64]]


def test_rollouts_are_rescored_as_steps(tokenizer: Any) -> None:
    ids = step_ids(tokenizer, StepTokens(), "rewardModels[0].process")
    prompt = tokenizer("Repeat the letter a.", add_special_tokens=False)["input_ids"]
    response = tokenizer("a\nb\n", add_special_tokens=False)["input_ids"]
    pad = int(tokenizer.pad_token_id)
    width = len(response) + 1
    # [left pad | prompt | response | right pad]
    row = [pad, *prompt, *response, pad]
    mask = [0] + [1] * (len(prompt) + len(response)) + [0]
    out = process_batch(torch.tensor([row]), torch.tensor([mask]), width, tokenizer, ids, "\n")
    assert int(out["step_mask"].sum()) == 2
    assert out["input_ids"][0, : len(prompt)].tolist() == prompt
    logits = torch.zeros(1, out["input_ids"].shape[1], 512)
    logits[0, :, ids.positive] = 2.0  # every step judged good: sigmoid(2)
    reward = process_rewards(
        logits, out["step_mask"], StepIds(ids.separator, ids.positive, ids.negative), "min"
    )
    assert float(reward) == pytest.approx(1 / (1 + math.exp(-2.0)))


def test_per_step_rewards_are_refused_with_the_reason() -> None:
    doc = {
        "algorithm": {"name": "grpo"},
        "models": {
            "actor": {"randomInit": {}},
            "rewardModels": [{"randomInit": {}, "process": {"aggregation": "per-step"}}],
        },
        "data": {"train": [{"builtin": "repeat-letter"}]},
        "rollout": {"samplesPerPrompt": 2},
        "training": {"rolloutBatchSize": 4, "trainBatchSize": 8, "microTrainBatchSize": 2},
    }
    with pytest.raises(ValidationError) as err:
        JobConfig.model_validate(doc)
    assert validation_messages(err.value) == [
        "models.rewardModels[0].process.aggregation: per-step (dense) process rewards are not "
        "implemented yet in this trainer (its advantage estimators take one reward per "
        "response); use min, last or mean"
    ]
