"""Builtin training data has a size the spec tells: a batch larger than it is refused by
`rlhf validate` and the operator, in the words the trainer uses once it has loaded the data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_config import messages, minimal

from rlhf_trainer.config import JobConfig
from rlhf_trainer.config.data_size import known_train_rows
from rlhf_trainer.context.job import JobError, total_steps
from rlhf_trainer.data.sources import mixed_rows

LETTERS = {"builtin": "repeat-letter"}


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        pytest.param(
            {"training": {"rolloutBatchSize": 1024}},
            "training.rolloutBatchSize: 1024 is larger than the data (512 prompts x 1 "
            "numEpisodes): not one full step; lower it or add data",
            id="online-train-split",
        ),
        pytest.param(
            {
                "data": {"train": [{**LETTERS, "split": "test"}]},
                "training": {"rolloutBatchSize": 128},
            },
            "training.rolloutBatchSize: 128 is larger than the data (64 prompts",
            id="online-other-split",
        ),
        pytest.param(
            {"data": {"train": [LETTERS], "maxSamples": 16}, "training": {"rolloutBatchSize": 32}},
            "training.rolloutBatchSize: 32 is larger than the data (16 prompts",
            id="max-samples",
        ),
        pytest.param(
            {
                "algorithm": {"name": "sft"},
                "models": {"actor": {"randomInit": {}}},
                "training": {"trainBatchSize": 640, "microTrainBatchSize": 8},
            },
            "training.trainBatchSize: 640 is larger than the data (512 samples x 1 epochs)",
            id="offline",
        ),
    ],
)
def test_a_batch_larger_than_builtin_data_is_refused(
    sections: dict[str, Any], expected: str
) -> None:
    found = messages(minimal(**sections))
    assert any(m.startswith(expected) for m in found), found


@pytest.mark.parametrize(
    "sections",
    [
        pytest.param({"training": {"rolloutBatchSize": 512}}, id="exactly-one-batch"),
        pytest.param({"training": {"rolloutBatchSize": 1024, "numEpisodes": 2}}, id="episodes"),
        # maxSteps fixes the step count; the prompts repeat as the steps need them
        pytest.param({"training": {"rolloutBatchSize": 1024, "maxSteps": 3}}, id="max-steps"),
        # a file's size is known only once it is read: the trainer checks it then
        pytest.param(
            {"data": {"train": [{"path": "p.jsonl"}]}, "training": {"rolloutBatchSize": 1024}},
            id="file",
        ),
    ],
)
def test_what_the_builtin_data_can_fill_passes(sections: dict[str, Any]) -> None:
    assert messages(minimal(**sections)) == []


@pytest.mark.parametrize(
    "data",
    [
        {"train": [LETTERS]},
        {"train": [{**LETTERS, "split": "test"}]},
        {"train": [LETTERS], "maxSamples": 100},
        {
            "train": [
                {**LETTERS, "probability": 0.3},
                {"builtin": "repeat-letter:abc", "split": "test", "probability": 0.7},
            ]
        },
    ],
    ids=["train", "test-split", "max-samples", "mixture"],
)
def test_the_rules_count_the_rows_the_trainer_loads(data: dict[str, Any]) -> None:
    cfg = JobConfig.model_validate(minimal(data=data))
    loaded = mixed_rows(cfg.data.train, cfg.data, Path("."), seed=1, kind="prompt")
    assert known_train_rows(cfg) == len(loaded)


def test_the_trainer_refuses_in_the_same_words() -> None:
    cfg = JobConfig.model_validate(minimal(training={"rolloutBatchSize": 64}))
    with pytest.raises(JobError) as err:
        total_steps(cfg, 10)
    assert str(err.value) == (
        "training.rolloutBatchSize: 64 is larger than the data (10 prompts x 1 numEpisodes): "
        "not one full step; lower it or add data"
    )
