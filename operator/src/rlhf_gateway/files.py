"""Files (pure): OpenAI's file object, its record in the tenant's namespace, and the JSONL check.

A file's record is a ConfigMap named by the file id in the tenant's namespace (labelled
`rlhf.dev/file`): Kubernetes holds who owns which file, RBAC decides who may upload one, and
listing a tenant's files is listing its ConfigMaps. The content lives in the file store.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel

from .errors import bad_request

FILE_LABEL = "rlhf.dev/file"
PURPOSES = ("fine-tune",)
# What a file's rows were recognised as (the method they can serve).
Format = Literal["supervised", "dpo", "reinforcement"]


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["uploaded", "processed", "error"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None


def new_file_id() -> str:
    """`file-` + 24 hex digits: also a valid ConfigMap name."""
    return f"file-{secrets.token_hex(12)}"


def is_file_id(value: str) -> bool:
    body = value.removeprefix("file-")
    return (
        value.startswith("file-") and len(body) == 24 and all(c in "0123456789abcdef" for c in body)
    )


def record(
    file_id: str,
    *,
    filename: str,
    purpose: str,
    size: int,
    created_at: int,
    location: str,
    fmt: Format,
    rows: int,
) -> dict[str, Any]:
    """The ConfigMap that records an uploaded file."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": file_id,
            "labels": {FILE_LABEL: "true", "rlhf.dev/purpose": purpose, "rlhf.dev/format": fmt},
        },
        "data": {
            "filename": filename,
            "purpose": purpose,
            "bytes": str(size),
            "createdAt": str(created_at),
            "location": location,
            "format": fmt,
            "rows": str(rows),
        },
    }


def file_object(configmap: dict[str, Any]) -> FileObject:
    data = configmap.get("data") or {}
    return FileObject(
        id=configmap["metadata"]["name"],
        bytes=int(data.get("bytes", "0")),
        created_at=int(data.get("createdAt", "0")),
        filename=data.get("filename", ""),
        purpose=data.get("purpose", "fine-tune"),
    )


def file_location(configmap: dict[str, Any]) -> str:
    return str((configmap.get("data") or {}).get("location", ""))


def file_format(configmap: dict[str, Any]) -> str:
    return str((configmap.get("data") or {}).get("format", ""))


def jsonl_rows(data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number from 1, row) of every non-empty line; 400 naming the first bad line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise bad_request(f"file: not UTF-8 text (byte {err.start})", "file") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            raise bad_request(f"file: line {number}: not valid JSON ({err})", "file") from None
        if not isinstance(row, dict):
            raise bad_request(
                f"file: line {number}: each line must be a JSON object, got {type(row).__name__}",
                "file",
            )
        yield number, row
