"""The invalid-manifest corpus: valid base + tables of patches (invalid.yaml, and the hostile
manifests of hostile.yaml), plus hostile text (hostile_text.py) and accepted values that must
stay inert (safe.yaml).

In a patch, `{$repeat: [text, n]}` stands for `text * n` (large values without large files)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent


def deep_merge(base: Any, patch: Any) -> Any:
    """Merge-patch semantics (RFC 7386): maps merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict) or not isinstance(base, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = deep_merge(out.get(key), value)
    return out


@dataclass(frozen=True)
class InvalidCase:
    id: str
    expect: str
    server: bool
    patch: dict[str, Any] | None
    update: dict[str, Any] | None

    @property
    def manifest(self) -> dict[str, Any]:
        """What is created: the bad manifest, or the valid base for update cases."""
        return deep_merge(base_manifest(), self.patch or {})

    @property
    def updated_manifest(self) -> dict[str, Any]:
        if self.update is None:
            raise ValueError(f"case {self.id} is not an update case")
        return deep_merge(base_manifest(), self.update)


def base_manifest() -> dict[str, Any]:
    data = yaml.safe_load((HERE / "base.yaml").read_text())
    assert isinstance(data, dict)
    return data


def expand(node: Any) -> Any:
    """`{$repeat: [text, n]}` -> text * n, anywhere in a patch."""
    if isinstance(node, dict):
        if set(node) == {"$repeat"}:
            text, times = node["$repeat"]
            return str(text) * int(times)
        return {k: expand(v) for k, v in node.items()}
    if isinstance(node, list):
        return [expand(v) for v in node]
    return node


def _rows(name: str) -> list[dict[str, Any]]:
    rows = yaml.safe_load((HERE / name).read_text())
    assert isinstance(rows, list)
    return [expand(row) for row in rows]


def hostile_cases() -> list[InvalidCase]:
    """The hostile manifests (issue 25), each refused naming its field."""
    return _cases(_rows("hostile.yaml"))


def invalid_cases() -> list[InvalidCase]:
    """Every refused manifest: the invalid corpus and the hostile one."""
    return _cases(_rows("invalid.yaml")) + hostile_cases()


def _cases(rows: list[dict[str, Any]]) -> list[InvalidCase]:
    return [
        InvalidCase(
            id=row["id"],
            expect=row["expect"],
            server=bool(row["server"]),
            patch=row.get("patch"),
            update=row.get("update"),
        )
        for row in rows
    ]


def names_field(line: str, path: str) -> bool:
    """True when an error line is about `path` (or a field inside it)."""
    return any(line.startswith(path + sep) for sep in (":", ".", "["))
