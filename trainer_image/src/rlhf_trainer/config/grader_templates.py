"""OpenAI's grader templates: `{{sample.output_text}}`, `{{sample.output_json.<path>}}`,
`{{item.<field>}}` (dotted paths; a number indexes a list), surrounded by literal text.

`check_template` refuses a tag that names anything else before a grader runs;
`render_template` fills the tags from one sample and its training row. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_TAG = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_PATH = re.compile(r"^(sample|item)((?:\.[A-Za-z0-9_\-]+)*)$")
SAMPLE_FIELDS = ("output_text", "output_json")


class TemplateError(ValueError):
    """A template names a variable that does not exist (OpenAI's invalid_variable_error)."""


def _paths(template: str) -> list[tuple[str, list[str]]]:
    paths = []
    for match in _TAG.finditer(template):
        text = match.group(1).strip()
        found = _PATH.match(text)
        if found is None:
            raise TemplateError(
                f"template variable {{{{{text}}}}} is not sample.output_text, "
                "sample.output_json[.<path>] or item.<field>"
            )
        root, rest = found.group(1), [p for p in found.group(2).split(".") if p]
        if root == "sample" and (not rest or rest[0] not in SAMPLE_FIELDS):
            raise TemplateError(
                f"template variable {{{{{text}}}}}: a sample has {' and '.join(SAMPLE_FIELDS)}"
            )
        paths.append((root, rest))
    return paths


def check_template(template: str) -> None:
    """Raise TemplateError for a tag that can never be filled."""
    _paths(template)


def uses_item(template: str) -> bool:
    return any(root == "item" for root, _ in _paths(template))


def _lookup(value: Any, path: list[str], where: str) -> Any:
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise TemplateError(f"{where} has no field {part!r}")
        where = f"{where}.{part}"
    return value


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def render_template(template: str, sample: Mapping[str, Any], item: Mapping[str, Any]) -> str:
    """The template with each tag replaced by the sample's or the item's value (strings as
    they are, anything else as JSON)."""
    roots = {"sample": sample, "item": item}

    def fill(match: re.Match[str]) -> str:
        found = _PATH.match(match.group(1).strip())
        if found is None:  # check_template refuses it first
            raise TemplateError(f"template variable {match.group(0)} is not valid")
        root, rest = found.group(1), [p for p in found.group(2).split(".") if p]
        return as_text(_lookup(roots[root], rest, root))

    return _TAG.sub(fill, template)
