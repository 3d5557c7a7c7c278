"""Grading samples: each grader type, multi graders, python graders in the sandbox, and the
OpenAI shapes of graders/validate and graders/run."""

from __future__ import annotations

import os
import textwrap
from typing import Any

import pytest

from rlhf_trainer.config import RewardFunctionLimits
from rlhf_trainer.grading.api import (
    ERROR_FLAGS,
    GraderRequestError,
    grader_to_openai,
    run_grader,
    validate_grader,
)
from rlhf_trainer.grading.engine import ErrorKind, GraderEngine

pytestmark = pytest.mark.timeout(120)


def check(operation: str, reference: str = "{{item.answer}}") -> dict[str, Any]:
    return {
        "type": "string_check",
        "name": "check",
        "input": "{{sample.output_text}}",
        "reference": reference,
        "operation": operation,
    }


def python(body: str, name: str = "py") -> dict[str, Any]:
    return {"type": "python", "name": name, "source": textwrap.dedent(body)}


@pytest.mark.parametrize(
    ("operation", "output", "answer", "expected"),
    [
        ("eq", "Paris", "Paris", 1.0),
        ("eq", "paris", "Paris", 0.0),
        ("ne", "Rome", "Paris", 1.0),
        ("ne", "Paris", "Paris", 0.0),
        ("like", "It is Paris.", "Paris", 1.0),
        ("like", "It is paris.", "Paris", 0.0),
        ("ilike", "It is PARIS.", "paris", 1.0),
        ("ilike", "Rome", "paris", 0.0),
    ],
)
def test_string_check(operation: str, output: str, answer: str, expected: float) -> None:
    response = run_grader(validate_grader(check(operation)), output, {"answer": answer})
    assert response["reward"] == expected
    assert not any(response["metadata"]["errors"][flag] for flag in ERROR_FLAGS)


def test_run_returns_openais_shape() -> None:
    response = run_grader(validate_grader(check("eq")), "x", {"answer": "x"})
    assert set(response) == {
        "reward",
        "sub_rewards",
        "metadata",
        "model_grader_token_usage_per_model",
    }
    meta = response["metadata"]
    assert meta["name"] == "check" and meta["type"] == "string_check"
    assert meta["execution_time"] >= 0 and meta["scores"] == {}
    assert set(ERROR_FLAGS) <= set(meta["errors"])
    try:
        from openai.types.fine_tuning.alpha import GraderRunResponse
    except ImportError:
        return
    parsed = GraderRunResponse.model_validate(response)
    assert parsed.reward == 1.0


def test_a_missing_item_field_is_an_invalid_variable_error() -> None:
    response = run_grader(validate_grader(check("eq")), "x", {})
    assert response["reward"] == 0.0
    assert response["metadata"]["errors"]["invalid_variable_error"] is True


def test_python_grader_gets_the_sample_and_the_item() -> None:
    grader = validate_grader(
        python(
            """
            def grade(sample, item):
                assert sample["output_json"] == {"n": 3}
                return sample["output_json"]["n"] / item["max"]
            """
        )
    )
    assert run_grader(grader, '{"n": 3}', {"max": 4})["reward"] == 0.75


def test_python_grader_errors_are_runtime_errors_with_details() -> None:
    grader = validate_grader(python("def grade(sample, item):\n    raise KeyError('nope')\n"))
    errors = run_grader(grader, "x", {})["metadata"]["errors"]
    assert errors["python_grader_runtime_error"] is True
    assert "KeyError: 'nope'" in errors["python_grader_runtime_error_details"]


def test_python_grader_runs_without_the_jobs_secrets_and_within_its_limits() -> None:
    os.environ["RLHF_TEST_SECRET"] = "hunter2"
    try:
        grader = validate_grader(
            python(
                """
                import os
                def grade(sample, item):
                    return 0.0 if "RLHF_TEST_SECRET" in os.environ else 1.0
                """
            )
        )
        assert run_grader(grader, "x")["reward"] == 1.0
    finally:
        del os.environ["RLHF_TEST_SECRET"]
    hog = validate_grader(
        python(
            """
            def grade(sample, item):
                hoard = [b"x" * (16 << 20) for _ in range(64)]  # 1 GiB if the limit failed
                return 1.0
            """
        )
    )
    response = run_grader(hog, "x", limits=RewardFunctionLimits(memoryMiB=256))
    errors = response["metadata"]["errors"]
    assert response["reward"] == 0.0
    assert errors["python_grader_runtime_error"] or errors["python_grader_server_error"]


def test_python_grader_timeout_is_a_server_error() -> None:
    grader = validate_grader(
        python("import time\ndef grade(sample, item):\n    time.sleep(30)\n    return 1.0\n")
    )
    response = run_grader(grader, "x", timeout_seconds=1.0)
    errors = response["metadata"]["errors"]
    assert errors["python_grader_server_error"] is True
    assert errors["python_grader_server_error_type"] == "timeout"


def test_multi_combines_sub_graders_by_calculate_output() -> None:
    grader = validate_grader(
        {
            "type": "multi",
            "name": "both",
            "graders": {
                "exact": check("eq"),
                "close": {
                    "type": "text_similarity",
                    "name": "close",
                    "input": "{{sample.output_text}}",
                    "reference": "{{item.answer}}",
                    "evaluation_metric": "rouge_1",
                },
                "short": python(
                    "def grade(sample, item):\n"
                    "    return 1.0 / len(sample['output_text'].split())\n"
                ),
            },
            "calculate_output": "0.5 * exact + 0.25 * close + 0.25 * short",
        }
    )
    response = run_grader(grader, "the cat", {"answer": "the cat sat"})
    assert response["sub_rewards"] == {"exact": 0.0, "close": pytest.approx(0.8), "short": 0.5}
    assert response["reward"] == pytest.approx(0.25 * 0.8 + 0.25 * 0.5)


def test_engine_grades_a_batch_with_one_worker_and_a_bad_sample_fails_alone() -> None:
    grader = validate_grader(
        python(
            """
            def grade(sample, item):
                if item["letter"] == "!":
                    raise ValueError("bad row")
                text = sample["output_text"].replace(" ", "")
                return sum(c == item["letter"] for c in text) / max(len(text), 1)
            """
        )
    )
    engine = GraderEngine(grader)
    try:
        engine.start()
        grades = engine.grade(
            ["a a a", "a b", "x"], [{"letter": "a"}, {"letter": "a"}, {"letter": "!"}]
        )
    finally:
        engine.close()
    assert [g.score for g in grades] == [1.0, 0.5, 0.0]
    assert grades[2].error is ErrorKind.PYTHON_RUNTIME and "bad row" in (grades[2].detail or "")


@pytest.mark.parametrize(
    ("obj", "param"),
    [
        ({**check("eq"), "operation": "regex"}, "grader.operation"),
        (python("x = 1"), "grader.source"),
        (
            {
                "type": "multi",
                "name": "m",
                "graders": {"a": check("eq")},
                "calculate_output": "os.system",
            },
            "grader",
        ),
        (
            {
                "type": "score_model",
                "name": "j",
                "model": "judge",
                "input": [{"role": "user", "content": "x"}],
            },
            "grader.model",
        ),
    ],
)
def test_validate_names_the_param(obj: dict[str, Any], param: str) -> None:
    with pytest.raises(GraderRequestError) as info:
        validate_grader(obj)
    assert info.value.param == param


def test_score_model_is_accepted_when_the_platform_configured_it() -> None:
    obj = {
        "type": "score_model",
        "name": "j",
        "model": "judge",
        "input": [{"role": "user", "content": "x"}],
    }
    grader = validate_grader(obj, score_models={"judge"})
    assert grader_to_openai(grader) == obj
    with pytest.raises(GraderRequestError, match="not a score model of this platform"):
        validate_grader(obj, score_models={"other"})


def test_meteor_is_refused_naming_the_field_where_wordnet_is_missing() -> None:
    from rlhf_trainer.grading.similarity import meteor_available

    obj = {
        "type": "text_similarity",
        "name": "m",
        "input": "{{sample.output_text}}",
        "reference": "the cat",
        "evaluation_metric": "meteor",
    }
    if meteor_available():
        assert run_grader(validate_grader(obj), "the cat")["reward"] > 0.9
        return
    with pytest.raises(GraderRequestError, match="WordNet") as info:
        validate_grader(obj)
    assert info.value.param == "grader.evaluation_metric"
