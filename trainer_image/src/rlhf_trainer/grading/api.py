"""`/v1/fine_tuning/alpha/graders/validate` and `/run` as pure functions, in OpenAI's shapes.

`validate_grader(obj)` returns the grader model or raises `GraderRequestError` with OpenAI's
`param` (e.g. `grader.calculate_output`) and a message per problem; `run_grader(grader,
model_sample, item)` grades one sample and returns OpenAI's run response: `reward`,
`sub_rewards`, `metadata` (`name`, `type`, `errors` flags, `execution_time`, `scores`, ...).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from rlhf_trainer.config import RewardFunctionLimits
from rlhf_trainer.config.graders import (
    Grader,
    MultiGrader,
    SimilarityMetric,
    TextSimilarityGrader,
    grader_error_path,
    score_model_problems,
)

from .engine import ErrorKind, Grade, GraderEngine
from .similarity import MetricUnavailable, wordnet

_ADAPTER: TypeAdapter[Grader] = TypeAdapter(Grader)
ERROR_FLAGS = (
    "formula_parse_error",
    "invalid_variable_error",
    "model_grader_parse_error",
    "model_grader_refusal_error",
    "model_grader_server_error",
    "other_error",
    "python_grader_runtime_error",
    "python_grader_server_error",
    "sample_parse_error",
    "truncated_observation_error",
    "unresponsive_reward_error",
)


class GraderRequestError(ValueError):
    """A grader OpenAI's API would refuse: `param` names the field, `messages` every problem."""

    def __init__(self, param: str, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.param = param
        self.messages = messages


def validate_grader(
    obj: Any, *, score_models: Collection[str] = (), param: str = "grader"
) -> Grader:
    """The grader model of an OpenAI grader object, or GraderRequestError naming the field.

    `score_models`: the score models the platform configured (score_model graders must name
    one); meteor is refused where NLTK's WordNet is not installed."""
    try:
        grader = _ADAPTER.validate_python(obj)
    except ValidationError as err:
        problems = [(grader_error_path(e["loc"], param), _message(e)) for e in err.errors()]
        raise GraderRequestError(problems[0][0], [f"{p}: {m}" for p, m in problems]) from None
    problems = [(f"{param}.{p}", m) for p, m in score_model_problems(grader, score_models)]
    problems += [(f"{param}.{p}", m) for p, m in _metric_problems(grader)]
    if problems:
        raise GraderRequestError(problems[0][0], [f"{p}: {m}" for p, m in problems])
    return grader


def _message(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] in {"enum", "literal_error", "union_tag_invalid"}:
        return f"{msg} (got {err.get('input')!r})"
    return msg


def _metric_problems(grader: Grader) -> list[tuple[str, str]]:
    leaves = (
        [(f"graders.{k}.", g) for k, g in grader.graders.items()]
        if isinstance(grader, MultiGrader)
        else [("", grader)]
    )
    out = []
    for prefix, leaf in leaves:
        if (
            isinstance(leaf, TextSimilarityGrader)
            and leaf.evaluation_metric is SimilarityMetric.METEOR
        ):
            try:
                wordnet()
            except MetricUnavailable as err:
                out.append((f"{prefix}evaluation_metric", str(err)))
    return out


def grader_to_openai(grader: Grader) -> dict[str, Any]:
    """The grader as OpenAI's API returns it (`validate`'s `grader`)."""
    out: dict[str, Any] = _ADAPTER.dump_python(grader, mode="json", exclude_none=True)
    return out


def run_response(grader: Grader, grade: Grade, seconds: float) -> dict[str, Any]:
    """OpenAI's grader run response for one grade."""
    errors: dict[str, Any] = dict.fromkeys(ERROR_FLAGS, False)
    errors |= {
        "python_grader_runtime_error_details": None,
        "python_grader_server_error_type": None,
        "model_grader_server_error_details": None,
    }
    if grade.error is not None:
        errors[grade.error.value] = True
        if grade.error is ErrorKind.PYTHON_RUNTIME:
            errors["python_grader_runtime_error_details"] = grade.detail
        elif grade.error is ErrorKind.PYTHON_SERVER:
            errors["python_grader_server_error_type"] = grade.server_error_type
        elif grade.error is ErrorKind.MODEL_SERVER:
            errors["model_grader_server_error_details"] = grade.detail
    return {
        "reward": grade.score,
        "sub_rewards": dict(grade.sub_scores) if isinstance(grader, MultiGrader) else {},
        "metadata": {
            "name": grader.name,
            "type": grader.type,
            "errors": errors,
            "execution_time": seconds,
            "scores": {},
            "token_usage": None,
            "sampled_model_name": None,
        },
        "model_grader_token_usage_per_model": {},
    }


def run_grader(
    grader: Grader,
    model_sample: str,
    item: Mapping[str, Any] | None = None,
    *,
    limits: RewardFunctionLimits | None = None,
    timeout_seconds: float = 60.0,
) -> dict[str, Any]:
    """Grade one sample (`model_sample`, the model's output text) against `item` (the row);
    a python grader runs in its sandboxed worker, started and ended by this call."""
    started = time.monotonic()
    engine = GraderEngine(grader, limits=limits, timeout_seconds=timeout_seconds)
    try:
        grade = engine.grade([model_sample], [dict(item or {})])[0]
    finally:
        engine.close()
    return run_response(grader, grade, round(time.monotonic() - started, 6))
