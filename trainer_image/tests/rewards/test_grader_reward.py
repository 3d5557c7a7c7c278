"""`models.graderReward` as one of a job's reward sources: graded against each sample's row,
weighted with the other sources, and failing the run (or scoring 0) as `onError` says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from rlhf_trainer.config import ModelsConfig
from rlhf_trainer.rewards.function_runner import RewardFunctionCodeError, RewardFunctionLoadError
from rlhf_trainer.rewards.sources import RewardSources

pytestmark = pytest.mark.timeout(120)

LETTER = """
def grade(sample, item):
    letters = [c for c in sample["output_text"] if not c.isspace()]
    return sum(c == item["letter"] for c in letters) / max(len(letters), 8)
"""


def sources(grader: dict[str, Any], **reward: Any) -> RewardSources:
    models = ModelsConfig.model_validate(
        {
            "actor": {"randomInit": {}},
            "rewardFunction": {"builtin": "repeat-letter"},
            "graderReward": {"grader": grader, **reward},
        }
    )
    return RewardSources(models, Path("."))


def score(src: RewardSources, responses: list[str], items: list[dict[str, Any]]) -> Any:
    prompts = [f"Repeat the letter {item.get('letter', 'a')}." for item in items]
    labels = [item.get("letter") for item in items]
    queries = [p + r for p, r in zip(prompts, responses, strict=True)]
    return src.score(queries, prompts, labels, responses=responses, items=items)


def test_a_python_grader_scores_each_sample_against_its_row_and_sums_with_its_weight() -> None:
    src = sources({"type": "python", "name": "letters", "source": LETTER}, weight=2.0)
    try:
        src.start()
        rewards, metrics = score(
            src, ["a a a a a a a a", "b b b b"], [{"letter": "a"}, {"letter": "b"}]
        )
    finally:
        src.close()
    # the builtin function agrees (1.0, 0.5), the grader counts twice: 1 + 2 x 1, 0.5 + 2 x 0.5
    assert rewards.tolist() == pytest.approx([3.0, 1.5])
    assert metrics["reward/grader"] == pytest.approx(0.75)
    assert metrics["reward/grader/errors"] == 0.0


def test_a_failing_sample_ends_the_run_unless_on_error_is_zero() -> None:
    grader = {
        "type": "string_check",
        "name": "exact",
        "input": "{{sample.output_text}}",
        "reference": "{{item.answer}}",
        "operation": "eq",
    }
    strict = sources(grader)
    with pytest.raises(RewardFunctionCodeError, match=r"item has no field 'answer'.*onError: zero"):
        score(strict, ["x", "y"], [{"answer": "x"}, {}])
    strict.close()
    lenient = sources(grader, onError="zero")
    rewards, metrics = score(lenient, ["x", "y"], [{"answer": "x"}, {}])
    lenient.close()
    assert metrics["reward/grader"] == 0.5 and metrics["reward/grader/errors"] == 1.0
    assert isinstance(rewards, torch.Tensor)


def test_a_grader_that_cannot_load_fails_at_start() -> None:
    src = sources(
        {
            "type": "python",
            "name": "broken",
            "source": "import no_such_module\ndef grade(s, i):\n    return 0\n",
        }
    )
    with pytest.raises(RewardFunctionLoadError, match="no_such_module"):
        src.start()
    src.close()
