"""Anthropic-shaped errors: `{"type": "error", "error": {"type", "message"}}`.

The same `ApiError`s as the OpenAI routes, written Anthropic's way: its
error type follows the status (400 invalid_request_error, 401
authentication_error, 404 not_found_error, 413 request_too_large, 429
rate_limit_error, 503 overloaded_error, 504 timeout_error, other 5xx
api_error). The field a 400 is about is named in the message, as Anthropic
does, and in `error.param` as well.
"""

from __future__ import annotations

from typing import Any

from deployments.api.errors import ApiError

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def error_type(status: int) -> str:
    if status in TYPES:
        return TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(err: ApiError) -> dict[str, Any]:
    message = err.message
    if err.param and err.param not in message:
        message = f"{err.param}: {message}"
    error: dict[str, Any] = {"type": error_type(err.status), "message": message}
    if err.param:
        error["param"] = err.param
    return {"type": "error", "error": error}
