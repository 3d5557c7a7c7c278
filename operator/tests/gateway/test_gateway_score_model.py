"""score_model graders: a reward model the platform configured (`scoreModels` in the gateway's
settings) becomes the job's reward model, its score mapped into the grader's `range`; where
none is configured, or the grader names another, it is a 400 naming `grader.model`."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from .harness import TINY, Service, gateway_service
from .test_gateway_graders import EXACT, ROWS
from .test_gateway_jobs import RLHFJOBS, upload

JUDGE_SOURCE = {"randomInit": {**TINY, "seed": 7}}


def judge(model: str = "tiny-judge", **extra: Any) -> dict[str, Any]:
    return {
        "type": "score_model",
        "name": "judge",
        "model": model,
        "input": [{"role": "user", "content": "Rate: {{sample.output_text}}"}],
        **extra,
    }


def reinforcement(grader: dict[str, Any]) -> Any:
    return {"type": "reinforcement", "reinforcement": {"grader": grader}}


@pytest.fixture
async def scored(tmp_path: pathlib.Path) -> AsyncIterator[Service]:
    models = [{"id": "tiny-judge", "source": JUDGE_SOURCE, "description": "a tiny judge"}]
    async with gateway_service(tmp_path, scoreModels=models) as running:
        yield running


@pytest.mark.parametrize(
    ("extra", "expected"),
    [({}, [0.0, 1.0]), ({"range": [-1, 5]}, [-1.0, 5.0])],
    ids=["default-range", "its-range"],
)
async def test_a_score_model_grader_is_the_jobs_reward_model(
    scored: Service, extra: dict[str, Any], expected: list[float]
) -> None:
    client = scored.client("team-a")
    job = await client.fine_tuning.jobs.create(
        model="tiny-llama-random",
        training_file=await upload(client, ROWS),
        method=reinforcement(judge(**extra)),
    )
    spec = scored.emulator.get(RLHFJOBS, job.id, "team-a")["spec"]
    (reward_model,) = spec["models"]["rewardModels"]  # with the CRD's defaults filled in
    assert reward_model["randomInit"]["seed"] == 7 and reward_model["scoreRange"] == expected
    assert "graderReward" not in spec["models"]
    valid = await client.fine_tuning.alpha.graders.validate(grader=judge())  # type: ignore[arg-type]
    assert valid.grader is not None and valid.grader.type == "score_model"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("grader", "param", "words"),
    [
        (judge("o3-mini"), "method.reinforcement.grader.model", "it has: tiny-judge"),
        (
            {
                "type": "multi",
                "name": "both",
                "graders": {"exact": EXACT, "judge": judge()},
                "calculate_output": "exact + judge",
            },
            "method.reinforcement.grader.graders.judge",
            "use it on its own",
        ),
        (judge(range=[1, 0]), "method.reinforcement.grader.range", "low < high"),
    ],
    ids=["unknown-model", "inside-multi", "empty-range"],
)
async def test_a_score_model_the_platform_cannot_serve_is_a_400_naming_it(
    scored: Service, grader: dict[str, Any], param: str, words: str
) -> None:
    client = scored.client("team-a")
    training = await upload(client, ROWS)
    with pytest.raises(openai.BadRequestError) as caught:
        await client.fine_tuning.jobs.create(
            model="tiny-llama-random", training_file=training, method=reinforcement(grader)
        )
    assert caught.value.body["param"] == param, caught.value.body  # type: ignore[index]
    assert words in caught.value.message
    assert scored.emulator.list(RLHFJOBS, "team-a") == []  # nothing half-created


async def test_without_score_models_a_job_is_refused_naming_grader_model(
    service: Service,
) -> None:
    client = service.client("team-a")
    with pytest.raises(openai.BadRequestError) as caught:
        await client.fine_tuning.jobs.create(
            model="tiny-llama-random",
            training_file=await upload(client, ROWS),
            method=reinforcement(judge()),
        )
    assert caught.value.body["param"] == "method.reinforcement.grader.model"  # type: ignore[index]
    assert "none is configured" in caught.value.message


async def test_graders_run_refuses_a_score_model_naming_it(scored: Service) -> None:
    """The gateway loads no model: a score model grades inside jobs only."""
    graders = scored.client("team-a").fine_tuning.alpha.graders
    with pytest.raises(openai.BadRequestError) as caught:
        await graders.run(grader=judge(), model_sample="a a")  # type: ignore[arg-type]
    assert caught.value.body["param"] == "grader.model"  # type: ignore[index]
    assert "inside training jobs only" in caught.value.message
