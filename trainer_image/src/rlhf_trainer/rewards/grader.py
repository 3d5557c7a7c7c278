"""`models.graderReward`: an OpenAI grader as a reward source. Each sample is graded with its
response as `sample.output_text` and its training row's fields as `item`
(`rlhf_trainer.grading.engine`). A python grader runs in the reward-function sandbox.

A sample the grader fails on ends the run (`onError: fail`, the default: a broken grader would
otherwise train on zeros), or scores 0 and is counted (`onError: zero`). The errors are the
reward function's types, so the runner tells the job's faults from the machine's the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlhf_trainer.config import RewardErrorPolicy
from rlhf_trainer.config.models import GraderReward
from rlhf_trainer.grading.api import GraderRequestError, validate_grader
from rlhf_trainer.grading.engine import ErrorKind, Grade, GraderEngine
from rlhf_trainer.grading.python_grader import GraderServerError

from .function_runner import (
    RewardFunctionCodeError,
    RewardFunctionError,
    RewardFunctionLoadError,
    RewardFunctionTimeout,
)
from .output import RewardResult

FIELD = "models.graderReward"


def _server_error(err: GraderServerError) -> RewardFunctionError:
    if err.kind == "load":
        return RewardFunctionLoadError(str(err))
    if err.kind == "limit":
        return RewardFunctionCodeError(str(err))
    if err.kind == "timeout":
        return RewardFunctionTimeout(str(err))
    return RewardFunctionError(str(err))


class GraderRewardSource:
    def __init__(self, cfg: GraderReward) -> None:
        self.cfg = cfg
        self.engine = GraderEngine(
            cfg.grader,
            limits=cfg.limits,
            timeout_seconds=cfg.timeout_seconds,
            limits_field=f"{FIELD}.limits",
        )

    @property
    def name(self) -> str:
        return f"grader {self.cfg.grader.name!r}"

    def start(self) -> None:
        """Refuse a grader this machine cannot run (meteor without WordNet) and load python
        graders, before the job's cluster starts."""
        try:
            validate_grader(self.cfg.grader.model_dump(mode="json"), param=f"{FIELD}.grader")
        except GraderRequestError as err:
            if "score model" not in str(err):  # the job's rules refuse score_model already
                raise RewardFunctionLoadError(str(err)) from None
        try:
            self.engine.start()
        except GraderServerError as err:
            raise _server_error(err) from None

    def __call__(
        self, responses: Sequence[str], items: Sequence[Mapping[str, Any]]
    ) -> RewardResult:
        grades = self.engine.grade(responses, items)
        failed = [g for g in grades if g.error is not None]
        if failed and self.cfg.on_error is RewardErrorPolicy.FAIL:
            raise self._failure(failed[0], len(failed), len(grades))
        rewards = torch.tensor([g.score for g in grades], dtype=torch.float32)
        logs = {"errors": float(len(failed))}
        for key in grades[0].sub_scores if grades else ():
            logs[f"sub/{key}"] = sum(g.sub_scores.get(key, 0.0) for g in grades) / len(grades)
        if not all(math.isfinite(v) for v in rewards.tolist()):
            raise RewardFunctionCodeError(f"{self.name} gave a score that is not finite")
        return RewardResult(rewards=rewards, scores=rewards, extra_logs=logs)

    def _failure(self, grade: Grade, count: int, total: int) -> RewardFunctionError:
        text = (
            f"{self.name} failed on {count} of {total} samples ({grade.error}): {grade.detail}; "
            f"set {FIELD}.onError: zero to score such samples 0 instead"
        )
        if grade.error is ErrorKind.PYTHON_SERVER:
            return _server_error(GraderServerError(text, grade.server_error_type or "crash"))
        return RewardFunctionCodeError(text)

    def close(self) -> None:
        self.engine.close()
