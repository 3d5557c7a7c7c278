"""Batch layout of each offline trainer (pure), and what each algorithm needs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlhf_trainer.config import AlgorithmName
from rlhf_trainer.data.offline import KTOItem, PreferenceItem, SFTItem
from rlhf_trainer.objectives.collate import collate, response_tokens, trim_right
from rlhf_trainer.objectives.kinds import OfflineConfigError, OfflineSpec, TrainerKind, offline_spec

from .jobs import offline_job

PAD = 0
MODEL = Path("/nonexistent-model")  # the pure functions never load it


def spec_of(algorithm: str, **extra: object) -> OfflineSpec:
    job = offline_job(algorithm, MODEL, "d.jsonl", steps=1, lr=1e-3, algorithm_extra=extra)
    return offline_spec(job)


@pytest.mark.parametrize(
    ("algorithm", "kind", "model_kind", "reference", "variant", "average"),
    [
        ("sft", TrainerKind.SFT, "causal-lm", False, None, False),
        ("reward-model", TrainerKind.REWARD_MODEL, "reward", False, None, False),
        ("dpo", TrainerKind.PREFERENCE, "causal-lm", True, "dpo", False),
        ("cdpo", TrainerKind.PREFERENCE, "causal-lm", True, "dpo", False),
        ("ipo", TrainerKind.PREFERENCE, "causal-lm", True, "ipo", True),
        ("kto", TrainerKind.KTO, "causal-lm", True, None, False),
    ],
    ids=lambda v: str(v),
)
def test_each_algorithm_maps_to_its_trainer(
    algorithm: str,
    kind: TrainerKind,
    model_kind: str,
    reference: bool,
    variant: str | None,
    average: bool,
) -> None:
    extra = {"labelSmoothing": 0.1} if algorithm == "cdpo" else {}
    spec = spec_of(algorithm, **extra)
    assert (spec.kind, spec.model_kind, spec.needs_reference) == (kind, model_kind, reference)
    assert (spec.dpo_variant, spec.average_logps) == (variant, average)
    # The placement plan gives a reference role exactly to the algorithms that need one.
    assert AlgorithmName(algorithm).needs_reference == reference


def test_online_algorithms_are_not_offline_trainers() -> None:
    # Every other refusal is a shared config rule (operator/tests/pure/test_one_truth.py).
    job = offline_job("sft", MODEL, "d.jsonl", steps=1, lr=1e-3)
    online = job.model_copy(
        update={"algorithm": job.algorithm.model_copy(update={"name": AlgorithmName.GRPO})}
    )
    with pytest.raises(OfflineConfigError, match=r"algorithm.name: grpo is an online algorithm"):
        offline_spec(online)


def test_sft_rows_mask_the_prompt_and_pad_right() -> None:
    items = [SFTItem([1, 2], [3, 4, 5]), SFTItem([1], [6])]
    batch = collate(items, spec_of("sft"), PAD, max_length=64)
    assert batch["input_ids"].shape == (2, 1, 5)
    assert batch["input_ids"][1, 0].tolist() == [1, 6, PAD, PAD, PAD]
    assert batch["attention_mask"][1, 0].tolist() == [1, 1, 0, 0, 0]
    assert batch["loss_mask"][0, 0].tolist() == [0, 0, 1, 1, 1]
    assert batch["loss_mask"][1, 0].tolist() == [0, 1, 0, 0, 0]
    assert response_tokens(batch) == 4


def test_pairs_keep_chosen_then_rejected_in_one_sample() -> None:
    items = [PreferenceItem([1, 2], [3], [4, 4]), PreferenceItem([5], [6, 6, 6], [7])]
    batch = collate(items, spec_of("dpo"), PAD, max_length=64)
    assert batch["input_ids"].shape == (2, 2, 4)
    assert batch["input_ids"][0].tolist() == [[1, 2, 3, PAD], [1, 2, 4, 4]]
    assert batch["loss_mask"][1].tolist() == [[0, 1, 1, 1], [0, 1, 0, 0]]


def test_kto_pairs_each_prompt_with_the_next_response_for_the_kl_estimate() -> None:
    items = [KTOItem([1], [2, 2], True), KTOItem([3, 3], [4], False), KTOItem([5], [6, 6, 6], True)]
    batch = collate(items, spec_of("kto"), PAD, max_length=4)
    ids = batch["input_ids"]
    assert ids[0, 0, :3].tolist() == [1, 2, 2]
    assert ids[0, 1, :2].tolist() == [1, 4]  # prompt 0 + response 1
    assert ids[1, 1, :3].tolist() == [3, 3, 6]  # prompt 1 + response 2, cut to maxLength 4 - 2
    assert int(batch["attention_mask"][1, 1].sum()) == 4
    assert ids[2, 1, :3].tolist() == [5, 2, 2]  # wraps around
    assert batch["desirable"].tolist() == [True, False, True]


def test_trim_right_drops_only_unused_padding() -> None:
    items = [PreferenceItem([1], [2], [3]), PreferenceItem([1], [2, 2, 2, 2], [3])]
    batch = collate(items, spec_of("dpo"), PAD, max_length=64)
    first = trim_right({k: v[:1] for k, v in batch.items()})
    assert first["input_ids"].shape == (1, 2, 2)
    assert torch.equal(trim_right(batch)["input_ids"], batch["input_ids"])
