"""Graders: `POST /v1/fine_tuning/alpha/graders/validate` and `/run`, and what a reinforcement
job's grader becomes in its RLHFJob spec.

The grader models and their evaluation are the trainer's (`rlhf_trainer.config.graders`,
`rlhf_trainer.grading`), so that a grader the gateway accepts or runs is graded the same way
in training. A job's grader goes into the spec as `models.graderReward.grader`; a
`score_model` grader names one of the platform's score models (`scoreModels` in the
gateway's settings), which becomes the job's reward model (`models.rewardModels`, its raw
score mapped into the grader's `range` by `scoreRange`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from rlhf_trainer.config.graders import Grader, MultiGrader, ScoreModelGrader
from rlhf_trainer.grading.api import (
    GraderRequestError,
    grader_to_openai,
    run_grader,
    validate_grader,
)

from ..deps import GatewayDep, TenantDep
from ..errors import ApiError, bad_request
from ..jobrequest import CreateJobRequest
from ..settings import GatewaySettings

router = APIRouter(prefix="/v1/fine_tuning/alpha/graders", tags=["graders"])
PARAM = "method.reinforcement.grader"
DEFAULT_RANGE = (0.0, 1.0)  # OpenAI's default for a score_model grader


class ValidateRequest(BaseModel):
    grader: dict[str, Any] = Field(description="An OpenAI grader object.")


class ValidateResponse(BaseModel):
    grader: dict[str, Any]


class RunRequest(BaseModel):
    grader: dict[str, Any] = Field(description="An OpenAI grader object.")
    model_sample: str = Field(description="The model's output text to grade.")
    item: dict[str, Any] | None = Field(None, description="The training row: {{item.<field>}}.")


def checked(obj: dict[str, Any], param: str, settings: GatewaySettings) -> Grader:
    """The grader model, or a 400 naming the grader's field (a score_model grader must name
    one of the platform's score models)."""
    score_models = [m.id for m in settings.score_models]
    try:
        return validate_grader(obj, score_models=score_models, param=param)
    except GraderRequestError as err:
        raise bad_request("; ".join(err.messages), err.param, "invalid_grader") from None


def reward_of(settings: GatewaySettings, req: CreateJobRequest) -> dict[str, Any]:
    """Spec fields (camelCase paths) that make the request's grader the job's reward."""
    obj = req.method.reinforcement.grader if req.method and req.method.reinforcement else {}
    grader = checked(obj, PARAM, settings)
    if isinstance(grader, MultiGrader):
        for key, sub in grader.graders.items():
            if isinstance(sub, ScoreModelGrader):
                raise bad_request(
                    f"{PARAM}.graders.{key}: a score_model grader is the job's reward model and "
                    "is scored apart from the other graders; use it on its own, not inside multi",
                    f"{PARAM}.graders.{key}",
                    "invalid_grader",
                )
    if isinstance(grader, ScoreModelGrader):
        entry = settings.score_model(grader.model)
        if entry is None:  # unreachable: checked() refused it
            raise bad_request(f"{PARAM}.model: unknown score model", f"{PARAM}.model")
        low, high = grader.range or DEFAULT_RANGE
        model = {**entry.source.to_manifest(), "scoreRange": [low, high]}
        return {"models.rewardModels": [model]}
    return {"models.graderReward.grader": grader_to_openai(grader)}


@router.post("/validate", response_model=ValidateResponse)
async def validate(gw: GatewayDep, _: TenantDep, body: ValidateRequest) -> ValidateResponse:
    return ValidateResponse(grader=grader_to_openai(checked(body.grader, "grader", gw.settings)))


@router.post("/run")
async def run(gw: GatewayDep, _: TenantDep, body: RunRequest) -> dict[str, Any]:
    """Grades one sample as training would (a python grader in its sandbox, in a thread).
    A score model runs only inside a job (the gateway loads no model): refused, naming it."""
    grader = checked(body.grader, "grader", gw.settings)
    leaves = grader.graders.items() if isinstance(grader, MultiGrader) else [("", grader)]
    for key, leaf in leaves:
        if isinstance(leaf, ScoreModelGrader):
            param = f"grader.graders.{key}.model" if key else "grader.model"
            raise bad_request(
                f"{param}: score model {leaf.model!r} scores samples inside training jobs only "
                "(as their reward model); graders/run cannot load it here",
                param,
                "invalid_grader",
            )
    try:
        return await asyncio.to_thread(run_grader, grader, body.model_sample, body.item or {})
    except OSError as err:
        raise ApiError(
            503, f"The grader could not be run: {err}", code="grader_unavailable"
        ) from None
