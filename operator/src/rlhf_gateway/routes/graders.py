"""Graders: what a reinforcement job's grader becomes in its RLHFJob spec.

The grader models and their evaluation are the trainer's (`rlhf_trainer.config.graders`);
the gateway only places the validated grader in the spec as the job's reward source.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import bad_request
from ..jobrequest import CreateJobRequest
from ..settings import GatewaySettings

PARAM = "method.reinforcement.grader"


def reward_of(settings: GatewaySettings, req: CreateJobRequest) -> dict[str, Any]:
    """Spec fields (camelCase paths) that make the request's grader the job's reward."""
    try:
        importlib.import_module("rlhf_trainer.config.graders")
    except ImportError:
        raise bad_request(
            f"{PARAM}: this platform's trainer has no graders yet "
            "(rlhf_trainer.config.graders is missing)",
            PARAM,
            "graders_unavailable",
        ) from None
    raise bad_request(f"{PARAM}: not wired yet", PARAM)
