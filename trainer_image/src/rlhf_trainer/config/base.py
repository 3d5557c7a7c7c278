"""The base every config model shares: camelCase on the wire, strict keys, immutable values.

Manifests are written in camelCase (Kubernetes convention); Python code uses snake_case
attribute names. Unknown keys are errors, so a typo such as `samplePerPrompt` is caught
instead of silently falling back to a default.

Data is read by the CRD's names only: `node_selector` in a manifest is an unknown field, as
the API server prunes or refuses it, so `rlhf validate`, `render` and the operator never apply
what a cluster would not store. Python code constructs models by attribute name
(`PlacementConfig(actor_gpus=2)`): only keyword construction accepts those.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Self, get_args

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic.config import ExtraValues
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError


class ManifestModel(BaseModel):
    """A model of manifest data: `model_validate` reads the CRD's (alias) names only."""

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: ExtraValues | None = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """Validate data (a manifest's dict): by the CRD's camelCase names only, unless
        `by_name=True` is asked for explicitly."""
        return super().model_validate(
            obj,
            strict=strict,
            extra=extra,
            from_attributes=from_attributes,
            context=context,
            by_alias=by_alias,
            by_name=False if by_name is None else by_name,
        )


class ConfigModel(ManifestModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        # Keyword construction in Python (`PlacementConfig(actor_gpus=2)`); data is read by
        # ManifestModel.model_validate, which takes the CRD's names only.
        validate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
        validate_default=True,
        # JSON, and so Kubernetes, has no infinity or NaN.
        allow_inf_nan=False,
    )

    def to_manifest(self) -> dict[str, Any]:
        """The camelCase dict a manifest would hold: defaults included, None omitted where
        None is the default. An explicit null over another default (`rewardClip: null`: no
        clipping) is kept: without it, reading the dict again would bring the default back."""
        return keep_explicit_nulls(
            self, self.model_dump(mode="json", by_alias=True, exclude_none=True)
        )

    def to_document(self) -> dict[str, Any]:
        """`to_manifest` with Python values (enums, not their strings): to edit, then validate."""
        return keep_explicit_nulls(self, self.model_dump(by_alias=True, exclude_none=True))


def _none_is_default(field: FieldInfo) -> bool:
    return field.default is None and field.default_factory is None


def _may_hold_models(annotation: Any) -> bool:
    """The annotation is, or contains (a list of, a dict of, a union with), a pydantic model."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_may_hold_models(arg) for arg in get_args(annotation))


@cache
def _null_plan(model_type: type[BaseModel]) -> tuple[tuple[str, str, bool], ...]:
    """(attribute, key, None is kept) for the fields `keep_explicit_nulls` must look at: those
    whose None is not the default, and those that may hold models; the rest (most: scalars
    with None for a default) never need it."""
    plan = []
    for name, field in model_type.model_fields.items():
        keeps_none = not _none_is_default(field) and not field.exclude
        if keeps_none or _may_hold_models(field.annotation):
            plan.append((name, field.serialization_alias or field.alias or name, keeps_none))
    return tuple(plan)


def keep_explicit_nulls(model: BaseModel, doc: dict[str, Any]) -> dict[str, Any]:
    """Put back into `doc` (`model` dumped by alias with exclude_none) the None values that
    `exclude_none` dropped although None is not the field's default; returns `doc`."""
    for name, key, keeps_none in _null_plan(type(model)):
        value = getattr(model, name)
        if value is None:
            if keeps_none:
                doc[key] = None
        elif isinstance(value, BaseModel) and isinstance(doc.get(key), dict):
            keep_explicit_nulls(value, doc[key])
        elif isinstance(value, list | tuple) and isinstance(doc.get(key), list):
            for item, dumped in zip(value, doc[key], strict=False):
                if isinstance(item, BaseModel) and isinstance(dumped, dict):
                    keep_explicit_nulls(item, dumped)
        elif isinstance(value, dict) and isinstance(doc.get(key), dict):
            for item_key, item in value.items():  # string keys (MultiGrader.graders)
                dumped = doc[key].get(item_key)
                if isinstance(item, BaseModel) and isinstance(dumped, dict):
                    keep_explicit_nulls(item, dumped)
    return doc


@dataclass(frozen=True)
class Problem:
    """One cross-field problem: the camelCase path inside the model that holds it, and why."""

    path: str
    message: str

    def render(self, prefix: str = "") -> str:
        where = f"{prefix}.{self.path}" if prefix and self.path else (prefix or self.path)
        return f"{where}: {self.message}"


CROSS_FIELD_ERROR = "cross_field"


def raise_problems(problems: list[Problem]) -> None:
    """Raise every problem at once, structured, so error formatting can name each field.

    pydantic lets a model validator raise one error; the problems travel in its context and
    `rlhf_trainer.config.errors.format_validation_error` expands them to one line each.
    """
    if not problems:
        return
    raise PydanticCustomError(
        CROSS_FIELD_ERROR,
        "{summary}",
        {
            "summary": "; ".join(p.render() for p in problems),
            "problems": [(p.path, p.message) for p in problems],
        },
    )
