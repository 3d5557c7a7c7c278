"""The base every config model shares: camelCase on the wire, strict keys, immutable values.

Manifests are written in camelCase (Kubernetes convention); Python code uses snake_case
attribute names. Unknown keys are errors, so a typo such as `samplePerPrompt` is caught
instead of silently falling back to a default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError


class ConfigModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
        validate_default=True,
    )

    def to_manifest(self) -> dict[str, Any]:
        """The camelCase dict a manifest would hold (defaults included, None omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


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
