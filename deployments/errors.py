"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}`.

Every failure the API returns goes through `ApiError`, so clients (the
official `openai` package included) see the status codes and shapes they
expect: 400 invalid request, 401 bad key, 404 unknown model or route, 413 body
too large, 429 overloaded (with `Retry-After`), 500 internal, 503 not ready.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from penelope_engine.errors import CapacityError, EngineError, InvalidRequestError

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answered to the client; `status` is the HTTP status code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def overloaded(message: str, retry_after_s: int) -> ApiError:
    return ApiError(
        429,
        message,
        type="rate_limit_error",
        code="overloaded",
        headers={"Retry-After": str(retry_after_s)},
    )


def unavailable(message: str, retry_after_s: int, code: str = "engine_unavailable") -> ApiError:
    return ApiError(
        503,
        message,
        type="server_error",
        code=code,
        headers={"Retry-After": str(retry_after_s)},
    )


def unauthorized() -> ApiError:
    return ApiError(
        401,
        "Invalid or missing API key: send 'Authorization: Bearer <key>'.",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )


def from_engine_error(exc: Exception, retry_after_s: int) -> ApiError:
    """Map an engine exception to the API error the client should see."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, InvalidRequestError):
        return invalid(str(exc))
    if isinstance(exc, CapacityError):
        return overloaded(f"The server cannot fit this request now: {exc}", retry_after_s)
    if isinstance(exc, EngineError):  # a fault while running it; the engine goes on
        log.error("engine fault: %s", exc)
        return unavailable(f"{exc}; retry the request.", retry_after_s, code="engine_error")
    log.exception("request failed", exc_info=exc)
    return ApiError(500, "Internal server error.", type="server_error", code="internal_error")


def _param_of(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "header", "path")]
    if not parts:
        return None
    text = parts[0]
    for part in parts[1:]:
        text += f"[{part}]" if part.isdigit() else f".{part}"
    return text


def validation_error(exc: RequestValidationError) -> ApiError:
    """The first validation failure, naming its field the way OpenAI does."""
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    param = _param_of(tuple(first.get("loc", ())))
    msg = str(first.get("msg", "invalid value"))
    return invalid(f"{param}: {msg}" if param else msg, param=param)


def install_handlers(app: FastAPI) -> None:
    """Route every error through `ApiError` so the body shape never varies."""

    async def on_api_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return exc.response()

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return validation_error(exc).response()

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return ApiError(exc.status_code, str(exc.detail), code=code).response()

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        return from_engine_error(exc, retry_after_s=1).response()

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
