"""Grading samples with an OpenAI grader: one `Grade` per sample.

A sample is `{"output_text": str, "output_json": parsed or None}` (OpenAI's `sample`); an item
is the training row's fields. Errors are OpenAI's error kinds (`ErrorKind`): a sample that
cannot be graded scores 0 and says why; the caller decides whether that ends a run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rlhf_trainer.config import RewardFunctionLimits
from rlhf_trainer.config.grader_formula import FormulaError, evaluate_formula
from rlhf_trainer.config.grader_templates import TemplateError, render_template
from rlhf_trainer.config.graders import (
    MultiGrader,
    PythonGrader,
    ScoreModelGrader,
    StringCheckGrader,
    StringOperation,
    TextSimilarityGrader,
)

from .python_grader import GraderServerError, PythonGraderRunner
from .similarity import MetricUnavailable, similarity

LeafGrader = StringCheckGrader | TextSimilarityGrader | PythonGrader | ScoreModelGrader


class ErrorKind(StrEnum):
    """OpenAI's `metadata.errors` flags that a grade can raise."""

    FORMULA = "formula_parse_error"
    INVALID_VARIABLE = "invalid_variable_error"
    PYTHON_RUNTIME = "python_grader_runtime_error"
    PYTHON_SERVER = "python_grader_server_error"
    MODEL_SERVER = "model_grader_server_error"
    OTHER = "other_error"


@dataclass(frozen=True)
class Grade:
    score: float
    sub_scores: dict[str, float] = field(default_factory=dict)
    error: ErrorKind | None = None
    detail: str | None = None
    # python_grader_server_error's kind: load, timeout, limit or crash.
    server_error_type: str | None = None


def sample_of(output_text: str) -> dict[str, Any]:
    try:
        parsed = json.loads(output_text)
    except ValueError:
        parsed = None
    return {"output_text": output_text, "output_json": parsed}


def string_check(operation: StringOperation, text: str, reference: str) -> float:
    if operation is StringOperation.EQ:
        return float(text == reference)
    if operation is StringOperation.NE:
        return float(text != reference)
    if operation is StringOperation.LIKE:
        return float(reference in text)
    return float(reference.lower() in text.lower())


class GraderEngine:
    """Grades batches with one grader; python graders keep a worker between batches."""

    def __init__(
        self,
        grader: StringCheckGrader
        | TextSimilarityGrader
        | PythonGrader
        | ScoreModelGrader
        | MultiGrader,
        *,
        limits: RewardFunctionLimits | None = None,
        timeout_seconds: float = 120.0,
        limits_field: str = "limits",
    ) -> None:
        self.grader = grader
        self.leaves: dict[str, LeafGrader] = (
            dict(grader.graders) if isinstance(grader, MultiGrader) else {grader.name: grader}
        )
        self._python = {
            key: PythonGraderRunner(
                leaf.name,
                leaf.source,
                limits=limits,
                timeout_seconds=timeout_seconds,
                field=limits_field,
            )
            for key, leaf in self.leaves.items()
            if isinstance(leaf, PythonGrader)
        }

    def start(self) -> None:
        """Load the python graders now (raises GraderServerError when one cannot load)."""
        for runner in self._python.values():
            runner.start()

    def grade(self, outputs: Sequence[str], items: Sequence[Mapping[str, Any]]) -> list[Grade]:
        if len(outputs) != len(items):
            raise ValueError("outputs and items must have the same length")
        samples = [sample_of(text) for text in outputs]
        per_leaf = {
            key: self._grade_leaf(key, leaf, samples, items) for key, leaf in self.leaves.items()
        }
        if not isinstance(self.grader, MultiGrader):
            return next(iter(per_leaf.values()))
        return [
            self._combine(self.grader, {k: g[i] for k, g in per_leaf.items()})
            for i in range(len(samples))
        ]

    @staticmethod
    def _combine(grader: MultiGrader, subs: dict[str, Grade]) -> Grade:
        scores = {key: g.score for key, g in subs.items()}
        failed = next((g for g in subs.values() if g.error is not None), None)
        if failed is not None:
            return Grade(0.0, scores, failed.error, failed.detail, failed.server_error_type)
        try:
            return Grade(evaluate_formula(grader.calculate_output, scores), scores)
        except FormulaError as err:
            return Grade(0.0, scores, ErrorKind.FORMULA, f"calculate_output {err}")

    def _grade_leaf(
        self,
        key: str,
        leaf: LeafGrader,
        samples: list[dict[str, Any]],
        items: Sequence[Mapping[str, Any]],
    ) -> list[Grade]:
        if isinstance(leaf, PythonGrader):
            try:
                results = self._python[key].grade(samples, items)
            except GraderServerError as err:
                return [
                    Grade(
                        0.0,
                        error=ErrorKind.PYTHON_SERVER,
                        detail=str(err),
                        server_error_type=err.kind,
                    )
                ] * len(samples)
            return [
                Grade(r.score)
                if r.score is not None
                else Grade(0.0, error=ErrorKind.PYTHON_RUNTIME, detail=r.error)
                for r in results
            ]
        if isinstance(leaf, ScoreModelGrader):
            detail = f"score model {leaf.model!r} is not configured on this platform"
            return [Grade(0.0, error=ErrorKind.MODEL_SERVER, detail=detail)] * len(samples)
        return [_text_grade(leaf, s, item) for s, item in zip(samples, items, strict=True)]

    def close(self) -> None:
        for runner in self._python.values():
            runner.close()


def _text_grade(
    leaf: StringCheckGrader | TextSimilarityGrader,
    sample: Mapping[str, Any],
    item: Mapping[str, Any],
) -> Grade:
    try:
        text = render_template(leaf.input, sample, item)
        reference = render_template(leaf.reference, sample, item)
    except TemplateError as err:
        return Grade(0.0, error=ErrorKind.INVALID_VARIABLE, detail=f"grader {leaf.name!r}: {err}")
    if isinstance(leaf, StringCheckGrader):
        return Grade(string_check(leaf.operation, text, reference))
    try:
        return Grade(similarity(leaf.evaluation_metric, text, reference))
    except MetricUnavailable as err:
        return Grade(0.0, error=ErrorKind.OTHER, detail=str(err))
