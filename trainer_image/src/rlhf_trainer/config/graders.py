"""Graders: OpenAI's grader objects as a reward source (`spec.models.graderReward`, whose
model is `models.GraderReward`).

The models mirror OpenAI's fine-tuning graders field for field, spelled as OpenAI spells them
(snake_case: `evaluation_metric`, `calculate_output`), so that a grader written for OpenAI's
API is pasted into a manifest unchanged and the gateway validates `POST /v1/fine_tuning/jobs`
and `/v1/fine_tuning/alpha/graders/*` with the same models:

- `string_check`: `input` `operation` `reference` (eq, ne, like = contains, ilike = contains
  ignoring case) -> 1 or 0;
- `text_similarity`: `input` against `reference` by `evaluation_metric` (fuzzy_match, bleu,
  gleu, meteor, rouge_1 .. rouge_5, rouge_l) -> 0..1;
- `python`: `source` defines `grade(sample, item) -> float`, run in the reward-function sandbox;
- `score_model`: a reward model the platform configured, named by `model`;
- `multi`: named sub-graders combined by `calculate_output`, arithmetic over their names.

`input` and `reference` are OpenAI templates: `{{sample.output_text}}`, `{{item.<field>}}`
(`grader_templates`). Pure: no torch; evaluation is in `rlhf_trainer.grading`.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .grader_formula import FormulaError, parse_formula
from .grader_templates import TemplateError, check_template

# OpenAI's cap on a python grader's source.
MAX_SOURCE_BYTES = 256 * 1024
GRADE_FUNCTION = "grade"


class OpenAIModel(BaseModel):
    """OpenAI's spelling (no camelCase aliases), strict keys, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class StringOperation(StrEnum):
    EQ = "eq"
    NE = "ne"
    LIKE = "like"
    ILIKE = "ilike"


class SimilarityMetric(StrEnum):
    FUZZY_MATCH = "fuzzy_match"
    BLEU = "bleu"
    GLEU = "gleu"
    METEOR = "meteor"
    ROUGE_1 = "rouge_1"
    ROUGE_2 = "rouge_2"
    ROUGE_3 = "rouge_3"
    ROUGE_4 = "rouge_4"
    ROUGE_5 = "rouge_5"
    ROUGE_L = "rouge_l"


GraderName = Annotated[str, Field(min_length=1, max_length=256)]
Template = Annotated[str, Field(max_length=64 * 1024)]


def _template(value: str) -> str:
    try:
        check_template(value)
    except TemplateError as err:
        raise ValueError(str(err)) from None
    return value


class StringCheckGrader(OpenAIModel):
    type: Literal["string_check"]
    name: GraderName
    input: Template = Field(description="The text graded, e.g. {{sample.output_text}}.")
    reference: Template = Field(description="The text compared with, e.g. {{item.answer}}.")
    operation: StringOperation

    _input = field_validator("input", "reference")(_template)


class TextSimilarityGrader(OpenAIModel):
    type: Literal["text_similarity"]
    name: GraderName
    input: Template
    reference: Template
    evaluation_metric: SimilarityMetric

    _input = field_validator("input", "reference")(_template)


class PythonGrader(OpenAIModel):
    type: Literal["python"]
    name: GraderName
    source: str = Field(
        min_length=1,
        description="Python source defining grade(sample, item) -> float; sample has "
        "output_text (and output_json when the output parses as JSON), item is the row.",
    )
    image_tag: str | None = Field(
        None,
        max_length=128,
        description="Accepted for OpenAI compatibility; the grader runs in the trainer's "
        "image (the gateway's for graders/run).",
    )

    @field_validator("source")
    @classmethod
    def _defines_grade(cls, source: str) -> str:
        if len(source.encode()) > MAX_SOURCE_BYTES:
            raise ValueError(f"is over {MAX_SOURCE_BYTES // 1024} KiB")
        try:
            tree = ast.parse(source, filename="<grader>")
        except SyntaxError as err:
            raise ValueError(f"does not parse: {err.msg} (line {err.lineno})") from None
        grade = [
            node
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == GRADE_FUNCTION
        ]
        if not grade:
            raise ValueError("defines no top-level function grade(sample, item)")
        args = grade[-1].args
        positional = len(args.posonlyargs) + len(args.args)
        if positional < 2 and args.vararg is None:
            raise ValueError("grade must take two arguments: grade(sample, item)")
        if isinstance(grade[-1], ast.AsyncFunctionDef):
            raise ValueError("grade must be a plain function, not async")
        return source


class ScoreModelMessage(OpenAIModel):
    role: Literal["user", "assistant", "system", "developer"]
    content: Template
    type: Literal["message"] | None = None

    _content = field_validator("content")(_template)


class SamplingParams(OpenAIModel):
    max_completions_tokens: int | None = Field(None, gt=0)
    reasoning_effort: str | None = None
    seed: int | None = None
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)


class ScoreModelGrader(OpenAIModel):
    type: Literal["score_model"]
    name: GraderName
    model: str = Field(min_length=1, description="A score model the platform configured.")
    input: list[ScoreModelMessage] = Field(min_length=1)
    range: tuple[float, float] | None = Field(None, description="Score range; default [0, 1].")
    sampling_params: SamplingParams | None = None

    @field_validator("range")
    @classmethod
    def _range_ordered(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not value[0] < value[1]:
            raise ValueError(f"must be [low, high] with low < high; got {list(value)}")
        return value


SubGrader = Annotated[
    StringCheckGrader | TextSimilarityGrader | PythonGrader | ScoreModelGrader,
    Field(discriminator="type"),
]


class MultiGrader(OpenAIModel):
    type: Literal["multi"]
    name: GraderName
    graders: dict[str, SubGrader] = Field(
        min_length=1,
        max_length=32,
        description="Sub-graders by the name calculate_output uses (a single grader object is "
        "named by its own name).",
    )
    calculate_output: str = Field(
        min_length=1,
        max_length=4096,
        description="Arithmetic over the sub-graders' names: + - * / ^ (or **), parentheses, "
        "numbers, min max abs floor ceil exp sqrt log.",
    )

    @field_validator("graders", mode="before")
    @classmethod
    def _single_grader(cls, value: Any) -> Any:
        # OpenAI's SDK types `graders` as one grader object; its guide uses a mapping.
        if isinstance(value, dict) and "type" in value and isinstance(value["type"], str):
            return {str(value.get("name") or value["type"]): value}
        return value

    @field_validator("graders")
    @classmethod
    def _names_are_identifiers(cls, graders: dict[str, Any]) -> dict[str, Any]:
        bad = [name for name in graders if not name.isidentifier()]
        if bad:
            raise ValueError(
                f"sub-grader names are variables of calculate_output and must be identifiers "
                f"(letters, digits, _): {', '.join(map(repr, bad))}"
            )
        return graders

    @model_validator(mode="after")
    def _formula_uses_graders(self) -> Self:
        try:
            parse_formula(self.calculate_output, set(self.graders))
        except FormulaError as err:
            raise ValueError(f"calculate_output: {err}") from None
        return self


Grader = Annotated[
    StringCheckGrader | TextSimilarityGrader | PythonGrader | ScoreModelGrader | MultiGrader,
    Field(discriminator="type"),
]
GRADER_TYPES = ("string_check", "text_similarity", "python", "score_model", "multi")


def score_model_names(grader: Any) -> list[tuple[str, str]]:
    """(field path, model) of each score_model grader inside `grader`."""
    if isinstance(grader, ScoreModelGrader):
        return [("model", grader.model)]
    if isinstance(grader, MultiGrader):
        return [
            (f"graders.{key}.model", sub.model)
            for key, sub in grader.graders.items()
            if isinstance(sub, ScoreModelGrader)
        ]
    return []


def score_model_problems(grader: Any, configured: Collection[str]) -> list[tuple[str, str]]:
    """(field path, why) for each score_model grader whose `model` is not a score model the
    platform configured (`configured`: their names)."""
    out = []
    for path, model in score_model_names(grader):
        if model in configured:
            continue
        if configured:
            why = (
                f"{model!r} is not a score model of this platform (it has: "
                + ", ".join(sorted(configured))
                + ")"
            )
        else:
            why = (
                f"score_model graders need a score model configured by the platform, and none "
                f"is configured here ({model!r} was asked for): use string_check, "
                "text_similarity, python or multi"
            )
        out.append((path, why))
    return out


def strip_grader_tags(loc: Sequence[int | str]) -> list[str]:
    """A pydantic error location without the discriminator tags pydantic inserts inside a
    grader (`grader.python.source` -> `grader.source`, `graders.a.string_check.input` ->
    `graders.a.input`)."""
    parts = [str(p) for p in loc]
    return [
        part
        for i, part in enumerate(parts)
        if not (
            part in GRADER_TYPES
            and (i == 0 or parts[i - 1] == "grader" or (i >= 2 and parts[i - 2] == "graders"))
        )
    ]


def grader_error_path(loc: Sequence[int | str], prefix: str = "") -> str:
    """`strip_grader_tags(loc)` as a field path under `prefix` (list indexes in brackets)."""
    path = prefix
    for part in strip_grader_tags(loc):
        path += f"[{part}]" if part.isdigit() else (f".{part}" if path else part)
    return path
