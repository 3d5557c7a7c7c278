"""Graders: what a reinforcement job's grader becomes in its RLHFJob spec.

The grader models and their evaluation are the trainer's (`rlhf_trainer.config.graders`):
the grader goes into the spec as `models.graderReward.grader`, where the shared config models
validate it like every other field (problems come back under `method.reinforcement.grader`).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from ..errors import bad_request
from ..jobrequest import CreateJobRequest
from ..settings import GatewaySettings

PARAM = "method.reinforcement.grader"
GRADERS_MODULE = "rlhf_trainer.config.graders"


def reward_of(settings: GatewaySettings, req: CreateJobRequest) -> dict[str, Any]:
    """Spec fields (camelCase paths) that make the request's grader the job's reward."""
    if importlib.util.find_spec(GRADERS_MODULE) is None:
        raise bad_request(
            f"{PARAM}: this platform's trainer has no graders ({GRADERS_MODULE} is missing): "
            "reinforcement jobs cannot be graded",
            PARAM,
            "graders_unavailable",
        )
    grader = req.method.reinforcement.grader if req.method and req.method.reinforcement else {}
    return {"models.graderReward.grader": grader}
