"""Label and field selectors with kube-apiserver's syntax (pure functions)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import errors

Matcher = Callable[[Mapping[str, Any]], bool]

# One requirement: `key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)`, `key notin (a,b)`.
_SET_RE = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # "!=" and "notin" also match objects that do not have the label at all.
        return not present or value not in self.values


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside `( ... )` value sets."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse `?labelSelector=`; a malformed selector is a 400, as on the real server."""
    requirements: list[Requirement] = []
    for part in _split_top_level(text or ""):
        if match := _SET_RE.match(part):
            values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
            requirements.append(Requirement(match["key"], match["op"], values))
        elif match := _EQ_RE.match(part):
            op = "!=" if match["op"] == "!=" else "="
            requirements.append(Requirement(match["key"], op, frozenset({match["value"]})))
        elif match := _EXISTS_RE.match(part):
            op = "!exists" if match["neg"] else "exists"
            requirements.append(Requirement(match["key"], op))
        else:
            raise errors.bad_request(f"unable to parse requirement: {part.strip()!r}")
    return requirements


def label_matcher(text: str | None) -> Matcher:
    requirements = parse_label_selector(text)

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in requirements)

    return matches


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_matcher(text: str | None) -> Matcher:
    """`?fieldSelector=`: `=`, `==`, `!=` on dotted paths (`metadata.name`, `status.phase`...).

    The real server only allows a few fields per resource; any dotted path is accepted here.
    """
    checks: list[tuple[str, bool, str]] = []
    for part in _split_top_level(text or ""):
        match = _EQ_RE.match(part)
        if not match:
            raise errors.bad_request(f"invalid field selector: {part.strip()!r}")
        checks.append((match["key"], match["op"] != "!=", match["value"]))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, path) == value) == equal for path, equal, value in checks)

    return matches
