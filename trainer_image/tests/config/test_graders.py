"""OpenAI grader models: what they accept, what they refuse and the field each refusal names;
their templates; `calculate_output` (hostile expressions included); and the grader as a job's
reward source (`models.graderReward`)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from rlhf_trainer.config import JobConfig, validation_messages
from rlhf_trainer.config.grader_formula import FormulaError, evaluate_formula, parse_formula
from rlhf_trainer.config.grader_templates import TemplateError, check_template, render_template
from rlhf_trainer.config.graders import Grader, MultiGrader, grader_error_path

GRADERS: TypeAdapter[Grader] = TypeAdapter(Grader)
CHECK = {
    "type": "string_check",
    "name": "exact",
    "input": "{{sample.output_text}}",
    "reference": "{{item.answer}}",
    "operation": "eq",
}
PYTHON = {"type": "python", "name": "py", "source": "def grade(sample, item):\n    return 1.0\n"}


def problems(obj: Any) -> list[str]:
    with pytest.raises(ValidationError) as info:
        GRADERS.validate_python(obj)
    return [f"{grader_error_path(e['loc'], 'grader')}: {e['msg']}" for e in info.value.errors()]


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(CHECK, id="string_check"),
        pytest.param(
            {
                "type": "text_similarity",
                "name": "close",
                "input": "{{sample.output_text}}",
                "reference": "{{item.answer}}",
                "evaluation_metric": "rouge_l",
            },
            id="text_similarity",
        ),
        pytest.param(PYTHON, id="python"),
        pytest.param({**PYTHON, "image_tag": "2025-05-08"}, id="python-image-tag"),
        pytest.param(
            {
                "type": "score_model",
                "name": "judge",
                "model": "judge-1",
                "input": [{"role": "user", "content": "Rate {{sample.output_text}}"}],
                "range": [0, 10],
            },
            id="score_model",
        ),
        pytest.param(
            {
                "type": "multi",
                "name": "both",
                "graders": {"exact": CHECK, "py": PYTHON},
                "calculate_output": "0.5 * exact + 0.5 * py",
            },
            id="multi",
        ),
    ],
)
def test_openai_grader_objects_are_accepted_as_written(obj: dict[str, Any]) -> None:
    grader = GRADERS.validate_python(obj)
    assert GRADERS.dump_python(grader, mode="json", exclude_none=True) == obj


def test_text_similarity_takes_every_openai_metric() -> None:
    for metric in ["fuzzy_match", "bleu", "gleu", "meteor", *(f"rouge_{n}" for n in "12345l")]:
        obj = {k: v for k, v in CHECK.items() if k != "operation"}
        GRADERS.validate_python({**obj, "type": "text_similarity", "evaluation_metric": metric})


def test_multi_takes_a_single_grader_object_as_the_sdk_types_it() -> None:
    grader = GRADERS.validate_python(
        {"type": "multi", "name": "m", "graders": CHECK, "calculate_output": "exact * 2"}
    )
    assert isinstance(grader, MultiGrader) and list(grader.graders) == ["exact"]


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({**CHECK, "operation": "regex"}, "grader.operation: Input should be 'eq'"),
        ({**CHECK, "input": "{{sample.text}}"}, "grader.input: Value error, template variable"),
        ({**CHECK, "reference": "{{ row.answer }}"}, "grader.reference: Value error, template"),
        ({**CHECK, "extra": 1}, "grader.extra: Extra inputs are not permitted"),
        ({**PYTHON, "source": "def grade(:"}, "grader.source: Value error, does not parse"),
        ({**PYTHON, "source": "x = 1"}, "grader.source: Value error, defines no top-level"),
        (
            {**PYTHON, "source": "def grade(x):\n  return 1"},
            "grader.source: Value error, grade must take two",
        ),
        ({"type": "nope", "name": "x"}, "grader: Input tag 'nope'"),
        (
            {
                "type": "multi",
                "name": "m",
                "graders": {"a": {**CHECK, "operation": "x"}},
                "calculate_output": "a",
            },
            "grader.graders.a.operation: Input should be",
        ),
        (
            {"type": "multi", "name": "m", "graders": {"a": CHECK}, "calculate_output": "a + b"},
            "grader: Value error, calculate_output: unknown name 'b' (the sub-graders are: a)",
        ),
        (
            {"type": "multi", "name": "m", "graders": {"a-b": CHECK}, "calculate_output": "1"},
            "grader.graders: Value error, sub-grader names are variables",
        ),
        (
            {
                "type": "multi",
                "name": "m",
                "graders": {"m": {**CHECK, "type": "multi"}},
                "calculate_output": "m",
            },
            "grader.graders.m: Input tag 'multi'",
        ),
        (
            {
                "type": "score_model",
                "name": "j",
                "model": "x",
                "input": [{"role": "user", "content": "hi"}],
                "range": [1, 0],
            },
            "grader.range: Value error, must be [low, high] with low < high",
        ),
    ],
)
def test_bad_graders_are_refused_naming_the_field(obj: dict[str, Any], expected: str) -> None:
    assert any(line.startswith(expected) for line in problems(obj)), problems(obj)


# --- templates ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{sample.output_text}}", "42"),
        ("{{ sample.output_text }}!", "42!"),
        ("{{item.answer}} vs {{sample.output_text}}", "42 vs 42"),
        ("{{item.meta.tags.1}}", "y"),
        ("{{item.meta}}", '{"tags": ["x", "y"]}'),
        ("{{sample.output_json.value}}", "7"),
        ("no tags", "no tags"),
    ],
)
def test_templates_fill_from_the_sample_and_the_item(template: str, expected: str) -> None:
    sample = {"output_text": "42", "output_json": {"value": 7}}
    item = {"answer": "42", "meta": {"tags": ["x", "y"]}}
    check_template(template)
    assert render_template(template, sample, item) == expected


@pytest.mark.parametrize(
    "template",
    ["{{sample}}", "{{sample.choices}}", "{{items.a}}", "{{item.a b}}", "{{__import__}}"],
)
def test_templates_naming_anything_else_are_refused(template: str) -> None:
    with pytest.raises(TemplateError):
        check_template(template)


def test_a_missing_item_field_is_an_invalid_variable() -> None:
    with pytest.raises(TemplateError, match="item has no field 'answer'"):
        render_template("{{item.answer}}", {"output_text": ""}, {})


# --- calculate_output --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("formula", "expected"),
    [
        ("a", 0.5),
        ("0.5 * a + 0.5 * b", 0.75),
        ("a ^ 2", 0.25),
        ("b ** 3", 1.0),
        ("-a + 1", 0.5),
        ("2 * a ^ 2", 0.5),  # ^ binds tighter than *, as in arithmetic
        ("(a + b) / 2", 0.75),
        ("min(a, b)", 0.5),
        ("max(a, b, 0.9)", 1.0),
        ("abs(a - b)", 0.5),
        ("floor(a + b)", 1.0),
        ("ceil(a)", 1.0),
        ("sqrt(a * 8)", 2.0),
        ("exp(0)", 1.0),
        ("log(b)", 0.0),
    ],
)
def test_calculate_output_is_arithmetic_over_the_sub_graders(formula: str, expected: float) -> None:
    assert evaluate_formula(formula, {"a": 0.5, "b": 1.0}) == pytest.approx(expected)


@pytest.mark.parametrize(
    "formula",
    [
        "__import__('os').system('true')",
        "a.__class__.__mro__",
        "open('/etc/passwd')",
        "eval('1')",
        "(lambda: 1)()",
        "[x for x in (1, 2)]",
        "a if b else 1",
        "a < b",
        "a and b",
        "'a' * 3",
        "True + a",
        "a[0]",
        "{a: 1}",
        "a; b",
        "a := 1",
        "f'{a}'",
        "max(*[a])",
        "max(a, key=abs)",
        "exp",
        "9 ** 9 ** 9",
        "exp(1000)",
        "1 / (a - a)",
        "(-1) ** 0.5",
        "(" * 500 + "a" + ")" * 500,
        "+".join(["a"] * 300),
    ],
)
def test_hostile_or_broken_formulas_are_refused(formula: str) -> None:
    with pytest.raises(FormulaError):
        evaluate_formula(formula, {"a": 0.5, "b": 1.0})


def test_formulas_are_checked_without_evaluation() -> None:
    parse_formula("0.3 * a + 0.7 * b", {"a", "b"})
    with pytest.raises(FormulaError, match="Attribute is not allowed"):
        parse_formula("a.real", {"a"})


# --- as a job's reward source ------------------------------------------------------------------
def job(grader: dict[str, Any], **reward: Any) -> dict[str, Any]:
    return {
        "algorithm": {"name": "grpo"},
        "models": {"actor": {"randomInit": {}}, "graderReward": {"grader": grader, **reward}},
        "data": {"train": [{"path": "rows.jsonl"}], "format": "openai"},
        "rollout": {"samplesPerPrompt": 4},
        "training": {"rolloutBatchSize": 8, "trainBatchSize": 8, "microTrainBatchSize": 2},
    }


def test_a_grader_is_a_reward_source_of_an_online_job() -> None:
    cfg = JobConfig.model_validate(job(CHECK, weight=2.0, onError="zero"))
    assert cfg.models.has_reward_source
    assert cfg.models.grader_reward is not None and cfg.models.grader_reward.weight == 2.0
    manifest = cfg.to_manifest()
    assert manifest["models"]["graderReward"]["grader"] == CHECK


@pytest.mark.parametrize(
    ("grader", "expected"),
    [
        ({**CHECK, "operation": "regex"}, "models.graderReward.grader.operation: Input should be"),
        (
            {
                "type": "multi",
                "name": "m",
                "graders": {"a": {**PYTHON, "source": "x"}},
                "calculate_output": "a",
            },
            "models.graderReward.grader.graders.a.source: defines no top-level function",
        ),
        (
            {
                "type": "score_model",
                "name": "j",
                "model": "judge",
                "input": [{"role": "user", "content": "x"}],
            },
            "models.graderReward.grader.model: 'judge': a job spec has no score models to name",
        ),
    ],
)
def test_a_bad_grader_in_a_job_names_its_field(grader: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValidationError) as info:
        JobConfig.model_validate(job(grader))
    lines = validation_messages(info.value)
    assert any(line.startswith(expected) for line in lines), lines


def test_openai_files_are_refused_for_trainers_whose_rows_they_cannot_hold() -> None:
    doc = {
        "algorithm": {"name": "kto"},
        "models": {"actor": {"randomInit": {}}},
        "data": {"train": [{"path": "rows.jsonl"}], "format": "openai"},
        "training": {"trainBatchSize": 8, "microTrainBatchSize": 2},
    }
    with pytest.raises(ValidationError) as info:
        JobConfig.model_validate(doc)
    assert any(
        line.startswith("data.format: openai holds OpenAI's supervised")
        for line in validation_messages(info.value)
    )
