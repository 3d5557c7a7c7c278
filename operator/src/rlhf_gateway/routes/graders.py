"""Graders: `POST /v1/fine_tuning/alpha/graders/validate` and `/run`, and what a reinforcement
job's grader becomes in its RLHFJob spec.

The grader models and their evaluation are the trainer's (`rlhf_trainer.config.graders`,
`rlhf_trainer.grading`), so that a grader the gateway accepts or runs is graded the same way
in training. A job's grader goes into the spec as `models.graderReward.grader`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from rlhf_trainer.config.graders import Grader
from rlhf_trainer.grading.api import (
    GraderRequestError,
    grader_to_openai,
    run_grader,
    validate_grader,
)

from ..deps import TenantDep
from ..errors import ApiError, bad_request
from ..jobrequest import CreateJobRequest
from ..settings import GatewaySettings

router = APIRouter(prefix="/v1/fine_tuning/alpha/graders", tags=["graders"])
PARAM = "method.reinforcement.grader"
# Score models the platform serves to score_model graders: none yet (the trainer refuses them
# too, naming the field), so such graders are a 400 here.
SCORE_MODELS: tuple[str, ...] = ()


class ValidateRequest(BaseModel):
    grader: dict[str, Any] = Field(description="An OpenAI grader object.")


class ValidateResponse(BaseModel):
    grader: dict[str, Any]


class RunRequest(BaseModel):
    grader: dict[str, Any] = Field(description="An OpenAI grader object.")
    model_sample: str = Field(description="The model's output text to grade.")
    item: dict[str, Any] | None = Field(None, description="The training row: {{item.<field>}}.")


def checked(obj: dict[str, Any], param: str) -> Grader:
    """The grader model, or a 400 naming the grader's field."""
    try:
        return validate_grader(obj, score_models=SCORE_MODELS, param=param)
    except GraderRequestError as err:
        raise bad_request("; ".join(err.messages), err.param, "invalid_grader") from None


def reward_of(settings: GatewaySettings, req: CreateJobRequest) -> dict[str, Any]:
    """Spec fields (camelCase paths) that make the request's grader the job's reward."""
    del settings  # the platform's grader settings (score models) will come from here
    grader = req.method.reinforcement.grader if req.method and req.method.reinforcement else {}
    return {"models.graderReward.grader": grader_to_openai(checked(grader, PARAM))}


@router.post("/validate", response_model=ValidateResponse)
async def validate(_: TenantDep, body: ValidateRequest) -> ValidateResponse:
    return ValidateResponse(grader=grader_to_openai(checked(body.grader, "grader")))


@router.post("/run")
async def run(_: TenantDep, body: RunRequest) -> dict[str, Any]:
    """Grades one sample as training would (a python grader in its sandbox, in a thread)."""
    grader = checked(body.grader, "grader")
    try:
        return await asyncio.to_thread(run_grader, grader, body.model_sample, body.item or {})
    except OSError as err:
        raise ApiError(
            503, f"The grader could not be run: {err}", code="grader_unavailable"
        ) from None
