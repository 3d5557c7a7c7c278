"""OpenAI's error envelope: `{"error": {"message", "type", "param", "code"}}`, and how
Kubernetes' answers and request-validation failures turn into it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel

# OpenAI's `type` per HTTP status (what its SDK and clients expect to read).
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "api_error",
    503: "api_error",
}
# Statuses a retry does not fix: the SDK retries 409 and 429 unless told not to.
_NO_RETRY = {409, 429}


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorEnvelope(BaseModel):
    error: ErrorBody


class ApiError(Exception):
    """Raised by handlers and the modules below them; rendered as OpenAI's envelope."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def envelope(self) -> dict[str, Any]:
        body = ErrorBody(
            message=self.message,
            type=_TYPES.get(self.status, "api_error"),
            param=self.param,
            code=self.code,
        )
        return ErrorEnvelope(error=body).model_dump()


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def not_found(what: str, ident: str, param: str | None = None) -> ApiError:
    return ApiError(404, f"No {what} found with id '{ident}'.", param=param, code="not_found")


def conflict(message: str, param: str | None = None) -> ApiError:
    return ApiError(409, message, param=param, code="conflict")


def error_response(error: ApiError) -> JSONResponse:
    headers = {"x-should-retry": "false"} if error.status in _NO_RETRY else None
    return JSONResponse(error.envelope(), status_code=error.status, headers=headers)


_UNION_TAGS = {"int", "float", "str", "bool", "none", "body", "query", "path"}


def _is_field(part: Any) -> bool:
    """False for the parts pydantic adds for union members (`int`, `literal['auto']`)."""
    text = str(part)
    return isinstance(part, int) or not (
        text in _UNION_TAGS or "[" in text or text.startswith("function-")
    )


def param_path(loc: Sequence[Any]) -> str:
    """A pydantic location as OpenAI names params: `hyperparameters.n_epochs`, `messages[0]`."""
    out = ""
    for part in (p for p in loc if _is_field(p)):
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


async def handle_api_error(_: Request, exc: Exception) -> JSONResponse:
    return error_response(cast(ApiError, exc))  # registered for ApiError only


async def handle_unexpected(_: Request, exc: Exception) -> JSONResponse:
    """Anything else is the gateway's fault: OpenAI's envelope, without internals."""
    del exc  # logged by the server
    return error_response(
        ApiError(500, "The gateway failed to handle the request.", code="internal_error")
    )


async def handle_validation_error(_: Request, exc: Exception) -> JSONResponse:
    """A request body or query that does not parse: 400 naming the first bad param."""
    errors = list(cast(RequestValidationError, exc).errors())
    param = param_path(errors[0]["loc"]) or None if errors else None
    message = "; ".join(f"{param_path(e['loc']) or 'body'}: {e['msg']}" for e in errors)
    return error_response(bad_request(message, param))
