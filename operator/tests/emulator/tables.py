"""`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`: what `kubectl get` shows.

Custom resources get their CRD's `additionalPrinterColumns` (after Name), like the real server;
built-in kinds get the columns of printers.py (Name and Age for the others). The JSONPath
subset covers what printer columns use: `.a.b`, `.a[0].b`, `.a[?(@.type=="Ready")].status`.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any

from .printers import columns_of
from .resources import ResourceInfo

JSON = dict[str, Any]
_STEP_RE = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\?\(@\.([^=!]+?)\s*==\s*[\"']([^\"']*)[\"']\)\]")


def jsonpath(obj: Any, path: str) -> Any:
    """Evaluate a printer-column JSONPath; None when any step is missing."""
    values = [obj]
    for match in _STEP_RE.finditer(path.strip().removeprefix("{").removesuffix("}")):
        key, index, filter_key, filter_value = match.groups()
        found = []
        for value in values:
            if key is not None and isinstance(value, Mapping) and key in value:
                found.append(value[key])
            elif index is not None and isinstance(value, list) and int(index) < len(value):
                found.append(value[int(index)])
            elif filter_key is not None and isinstance(value, list):
                found += [
                    v
                    for v in value
                    if isinstance(v, Mapping) and str(v.get(filter_key)) == filter_value
                ]
        values = found
    return values[0] if values else None


def human_age(timestamp: str | None, now: datetime.datetime) -> str | None:
    """kubectl's short durations: 45s, 12m, 3h, 5d."""
    if not timestamp:
        return None
    then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3 * 3600:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _cell(value: Any, column_type: str, now: datetime.datetime) -> Any:
    if value is None:
        return None
    if column_type == "date":
        return human_age(str(value), now)
    if column_type == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if column_type == "number" and isinstance(value, (int, float)):
        return value
    if column_type == "boolean":
        return bool(value)
    return value if isinstance(value, str) else str(value)


def _value(obj: JSON, column: Mapping[str, Any]) -> Any:
    if "compute" in column:
        return column["compute"](obj)
    return jsonpath(obj, column["jsonPath"])


def table(info: ResourceInfo, items: list[JSON], *, rv: str = "") -> JSON:
    now = datetime.datetime.now(datetime.UTC)
    columns: list[Mapping[str, Any]] = [
        *(
            info.printer_columns
            or columns_of(info.group, info.plural)
            or [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
        )
    ]
    definitions = [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "priority": 0,
            "description": "Name must be unique within a namespace.",
        }
    ]
    definitions += [
        {
            "name": c["name"],
            "type": c.get("type", "string"),
            "format": c.get("format", ""),
            "priority": c.get("priority", 0),
            "description": c.get("description", ""),
        }
        for c in columns
    ]
    rows = [
        {
            "cells": [obj["metadata"]["name"]]
            + [_cell(_value(obj, c), c.get("type", "string"), now) for c in columns],
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            },
        }
        for obj in items
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": definitions,
        "rows": rows,
    }
