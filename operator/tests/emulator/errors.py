"""API errors as kube-apiserver reports them: an HTTP code plus a `v1/Status` body."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from support.crd_schema import FieldError


class ApiError(Exception):
    """Raised anywhere in the emulator; the server renders it as a `Status` object."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(name: str | None, group: str, kind: str) -> dict[str, Any]:
    details: dict[str, Any] = {"kind": kind}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    """`resource` is the plural as the real server prints it: `configmaps`, `rayjobs.ray.io`."""
    plural = resource.split(".", 1)[0]
    return ApiError(
        404, "NotFound", f'{resource} "{name}" not found', _details(name, group, plural)
    )


def no_such_path(path: str) -> ApiError:
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    plural = resource.split(".", 1)[0]
    return ApiError(
        409,
        "AlreadyExists",
        f'{resource} "{name}" already exists',
        _details(name, group, plural),
    )


def conflict(resource: str, name: str, group: str = "", why: str | None = None) -> ApiError:
    plural = resource.split(".", 1)[0]
    reason = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": {reason}',
        _details(name, group, plural),
    )


def invalid(kind: str, group: str, name: str, errors: Sequence[FieldError]) -> ApiError:
    """422 Invalid naming every field, like `RayJob.ray.io "x" is invalid: [spec.a: ...]`."""
    qualified = f"{kind}.{group}" if group else kind
    texts = [str(error) for error in errors]
    listed = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    causes = [
        {"reason": _cause_reason(e.message), "message": e.message, "field": e.path} for e in errors
    ]
    details = _details(name, group, kind)
    details["causes"] = causes
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {listed}', details)


def _cause_reason(message: str) -> str:
    for prefix, reason in (
        ("Required value", "FieldValueRequired"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Forbidden", "FieldValueForbidden"),
        ("unknown field", "FieldValueInvalid"),
    ):
        if message.startswith(prefix):
            return reason
    return "FieldValueInvalid"


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unprocessable(message: str) -> ApiError:
    """422 without field causes: what a failed JSON-patch `test` or a bad patch path gives."""
    return ApiError(422, "Invalid", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str, accepted: Sequence[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format ({content_type}) - accepted media "
        f"types include: {', '.join(accepted)}",
    )
