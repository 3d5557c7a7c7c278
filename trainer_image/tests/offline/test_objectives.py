"""Forward passes and objectives of the offline trainers on a real tiny Llama (no Ray)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from rlhf_trainer.data.offline import KTOItem, PreferenceItem, SFTItem
from rlhf_trainer.models.loading import load_causal_lm, load_value_model
from rlhf_trainer.models.value import ValueModel, score_with_model
from rlhf_trainer.objectives.collate import collate
from rlhf_trainer.objectives.kinds import OfflineSpec, offline_spec
from rlhf_trainer.objectives.offline import (
    kl_reference_point,
    kto_objective,
    preference_objective,
    reward_model_objective,
    sequence_logps_of,
    sequence_scores,
    sft_objective,
)

from .jobs import offline_job

PAD = 0
PROMPT, SHORT, LONG = [1, 17, 40], [55, 60, 2], [70, 71, 72, 73, 74, 2]


def spec_of(algorithm: str) -> OfflineSpec:
    return offline_spec(offline_job(algorithm, Path("/m"), "d.jsonl", steps=1, lr=1e-3))


@pytest.fixture(scope="module")
def model(tiny_model_dir: Path) -> torch.nn.Module:
    loaded: torch.nn.Module = load_causal_lm(tiny_model_dir)
    return loaded.eval()


def manual_logp(model: torch.nn.Module, prompt: list[int], response: list[int]) -> float:
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids).logits[0, :-1]
    logps = torch.log_softmax(logits.float(), -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return float(logps[len(prompt) - 1 :].sum())


@torch.no_grad()
def test_sequence_logps_are_the_response_sum_whatever_the_padding(model: torch.nn.Module) -> None:
    pairs = collate([PreferenceItem(PROMPT, SHORT, LONG)], spec_of("dpo"), PAD, 64)
    logps = sequence_logps_of(model, pairs, average=False)
    assert logps.shape == (1, 2)
    # The short response is right-padded to the long one's length; padding changes nothing.
    assert logps[0, 0].item() == pytest.approx(manual_logp(model, PROMPT, SHORT), abs=1e-4)
    assert logps[0, 1].item() == pytest.approx(manual_logp(model, PROMPT, LONG), abs=1e-4)
    mean = sequence_logps_of(model, pairs, average=True)
    assert mean[0, 1].item() == pytest.approx(logps[0, 1].item() / len(LONG), abs=1e-5)


@torch.no_grad()
def test_sft_loss_is_the_mean_nll_of_response_tokens_only(model: torch.nn.Module) -> None:
    batch = collate([SFTItem(PROMPT, SHORT), SFTItem(PROMPT, LONG)], spec_of("sft"), PAD, 64)
    loss, stats = sft_objective(model, batch)
    tokens = len(SHORT) + len(LONG)
    expected = -(manual_logp(model, PROMPT, SHORT) + manual_logp(model, PROMPT, LONG)) / tokens
    assert loss.item() == pytest.approx(expected, abs=1e-4)
    assert stats["loss"].item() == loss.item()


@pytest.mark.parametrize(("algorithm", "first_loss"), [("dpo", math.log(2)), ("ipo", 25.0)])
@torch.no_grad()
def test_preference_loss_starts_at_its_no_preference_value(
    model: torch.nn.Module, algorithm: str, first_loss: float
) -> None:
    # Policy == reference (the start of every DPO run): h = 0, so DPO's loss is log 2 and
    # IPO's (0 - 1/(2 beta))^2 = 25 with beta 0.1; no pair is ranked right yet.
    spec = spec_of(algorithm)
    batch = collate([PreferenceItem(PROMPT, SHORT, LONG)] * 2, spec, PAD, 64)
    policy = sequence_logps_of(model, batch, average=spec.average_logps)
    job = offline_job(algorithm, Path("/m"), "d.jsonl", steps=1, lr=1e-3)
    loss, stats = preference_objective(policy, policy.clone(), spec, job.algorithm)
    assert loss.item() == pytest.approx(first_loss, abs=1e-5)
    assert (stats["margin"].item(), stats["accuracy"].item()) == (0.0, 0.0)


@torch.no_grad()
def test_kto_reference_point_is_zero_for_an_unchanged_policy(model: torch.nn.Module) -> None:
    items = [KTOItem(PROMPT, SHORT, True), KTOItem(PROMPT, LONG, False)]
    batch = collate(items, spec_of("kto"), PAD, 64)
    policy = sequence_logps_of(model, batch, average=False)
    kl = kl_reference_point(policy, policy.clone())
    job = offline_job("kto", Path("/m"), "d.jsonl", steps=1, lr=1e-3)
    loss, stats = kto_objective(policy, policy.clone(), batch["desirable"], kl, job.algorithm)
    assert kl.item() == 0.0
    assert loss.item() == pytest.approx(0.5)  # 1 - sigmoid(0) for both examples
    assert stats["desirable_reward"].item() == 0.0


@pytest.mark.parametrize(
    ("scores", "margin", "accuracy"),
    [
        ([[2.0, 1.0], [0.5, -0.5]], None, 1.0),
        ([[1.0, 2.0], [0.5, -0.5]], None, 0.5),
        ([[0.0, 0.0], [0.0, 0.0]], 1.0, 0.0),
    ],
    ids=["both-right", "one-right", "ties-with-margin"],
)
def test_reward_model_objective(
    scores: list[list[float]], margin: float | None, accuracy: float
) -> None:
    s = torch.tensor(scores)
    loss, stats = reward_model_objective(s, margin)
    expected = -F.logsigmoid(s[:, 0] - s[:, 1] - (margin or 0.0)).mean()
    assert loss.item() == pytest.approx(expected.item())
    assert stats["accuracy"].item() == accuracy


@torch.no_grad()
def test_sequence_scores_read_the_value_at_each_last_real_token(tiny_model_dir: Path) -> None:
    value_model: ValueModel = load_value_model(tiny_model_dir, head_seed=3).eval()
    batch = collate([PreferenceItem(PROMPT, SHORT, LONG)], spec_of("reward-model"), PAD, 64)
    scores = sequence_scores(value_model, batch)
    for k, response in enumerate((SHORT, LONG)):
        ids = torch.tensor([PROMPT + response])
        alone = score_with_model(value_model, ids, torch.ones_like(ids))
        assert scores[0, k].item() == pytest.approx(alone.item(), abs=1e-5)
