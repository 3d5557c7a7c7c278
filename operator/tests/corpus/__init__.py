"""The invalid-manifest corpus: valid base + table of patches (see invalid.yaml)."""

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


def invalid_cases() -> list[InvalidCase]:
    rows = yaml.safe_load((HERE / "invalid.yaml").read_text())
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
