"""Graders through the SDK: validate and run (the trainer's own grading, python graders in
their sandbox), and a reinforcement job whose reward is the tenant's grader."""

from __future__ import annotations

import openai
import pytest

from .harness import Service
from .test_gateway_jobs import RLHFJOBS, upload

PYTHON_GRADER = {
    "type": "python",
    "name": "repeat-letter",
    "source": (
        "def grade(sample, item):\n"
        "    letters = [c for c in sample['output_text'] if not c.isspace()]\n"
        "    return sum(c == item['letter'] for c in letters) / max(len(letters), 8)\n"
    ),
}
EXACT = {
    "type": "string_check",
    "name": "exact",
    "operation": "eq",
    "input": "{{sample.output_text}}",
    "reference": "{{item.answer}}",
}
ROWS = [
    {"messages": [{"role": "user", "content": f"Repeat the letter {c}."}], "letter": c}
    for c in "abcd"
]


async def test_validate_and_run_graders(service: Service) -> None:
    graders = service.client("team-a").fine_tuning.alpha.graders
    valid = await graders.validate(grader=EXACT)  # type: ignore[arg-type]
    assert valid.grader is not None and valid.grader.name == "exact"  # type: ignore[union-attr]
    ran = await graders.run(grader=EXACT, model_sample="a a", item={"answer": "a a"})  # type: ignore[arg-type]
    assert ran.reward == 1.0 and ran.metadata.type == "string_check"
    assert not ran.metadata.errors.other_error
    graded = await graders.run(
        grader=PYTHON_GRADER,  # type: ignore[arg-type]
        model_sample="a a a a a a a a",
        item={"letter": "a"},
    )
    assert graded.reward == 1.0 and graded.metadata.execution_time > 0
    multi = {
        "type": "multi",
        "name": "both",
        "graders": {"exact": EXACT, "letters": PYTHON_GRADER},
        "calculate_output": "0.5 * exact + 0.5 * letters",
    }
    both = await graders.run(grader=multi, model_sample="b", item={"answer": "b", "letter": "b"})  # type: ignore[arg-type]
    assert both.reward == pytest.approx(0.5 * 1.0 + 0.5 * (1 / 8))
    assert both.sub_rewards == {"exact": 1.0, "letters": pytest.approx(1 / 8)}


@pytest.mark.parametrize(
    ("grader", "param", "words"),
    [
        ({**EXACT, "operation": "equals?"}, "grader.operation", "equals?"),
        (
            {
                "type": "multi",
                "name": "m",
                "graders": {"exact": EXACT},
                "calculate_output": "__import__('os')",
            },
            "grader",
            "calculate_output: only min",
        ),
        (
            {
                "type": "score_model",
                "name": "judge",
                "model": "o3-mini",
                "input": [{"role": "user", "content": "Rate {{sample.output_text}}"}],
            },
            "grader.model",
            "score_model graders need a score model",
        ),
        ({"type": "sentiment"}, "grader", "'sentiment'"),
    ],
    ids=["operation", "unsafe-formula", "no-score-model", "unknown-type"],
)
async def test_a_bad_grader_is_a_400_naming_its_field(
    service: Service, grader: dict[str, object], param: str, words: str
) -> None:
    graders = service.client("team-a").fine_tuning.alpha.graders
    with pytest.raises(openai.BadRequestError) as caught:
        await graders.validate(grader=grader)  # type: ignore[arg-type]
    assert caught.value.body["param"] == param  # type: ignore[index]
    assert words in caught.value.message


async def test_a_reinforcement_job_is_graded_by_the_tenants_grader(service: Service) -> None:
    client = service.client("team-a")
    job = await client.fine_tuning.jobs.create(
        model="tiny-llama-random",
        training_file=await upload(client, ROWS),
        validation_file=await upload(client, ROWS[:2]),
        method={
            "type": "reinforcement",
            "reinforcement": {
                "grader": PYTHON_GRADER,  # type: ignore[typeddict-item]
                "hyperparameters": {"compute_multiplier": 2, "eval_interval": 5},
            },
        },
    )
    assert job.method is not None and job.method.type == "reinforcement"
    spec = service.emulator.get(RLHFJOBS, job.id, "team-a")["spec"]
    assert spec["algorithm"]["name"] == "grpo"
    assert spec["models"]["graderReward"]["grader"]["source"] == PYTHON_GRADER["source"]
    assert spec["data"]["format"] == "openai"
    assert spec["rollout"]["samplesPerPrompt"] == 8  # the catalog's 4 x compute_multiplier 2
    assert spec["training"]["evalEverySteps"] == 5
    assert spec["data"]["eval"][0]["path"].endswith(f"{job.validation_file}.jsonl")


async def test_eval_interval_without_a_validation_file_is_refused_in_the_validators_words(
    service: Service,
) -> None:
    client = service.client("team-a")
    method = {
        "type": "reinforcement",
        "reinforcement": {"grader": EXACT, "hyperparameters": {"eval_interval": 5}},
    }
    with pytest.raises(openai.BadRequestError) as caught:
        await client.fine_tuning.jobs.create(
            model="tiny-llama-random",
            training_file=await upload(client, ROWS),
            method=method,  # type: ignore[arg-type]
        )
    assert caught.value.body["param"] == "method.reinforcement.hyperparameters.eval_interval"  # type: ignore[index]
    assert "set data.eval too" in caught.value.message
    assert service.emulator.list(RLHFJOBS, "team-a") == []
