"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}`.

Every failure the API returns goes through `ApiError`, so clients (the
official `openai` package included) see the status codes and shapes they
expect: 400 invalid request, 401 bad key, 404 unknown model or route, 413 body
too large, 429 overloaded (with `Retry-After`), 500 internal, 503 not ready.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
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

    def response(self, body_of: BodyOf | None = None) -> JSONResponse:
        body = self.body() if body_of is None else body_of(self)
        return JSONResponse(body, status_code=self.status, headers=self.headers)


BodyOf = Callable[[ApiError], dict[str, Any]]  # an API's error shape
ErrorShapes = Mapping[str, BodyOf]  # route path prefix -> its API's error shape


def shape_for(path: str, shapes: ErrorShapes) -> BodyOf | None:
    """The error shape of the route at `path`; None: OpenAI's."""
    return next((body for prefix, body in shapes.items() if path.startswith(prefix)), None)


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
        "Invalid or missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
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


# What a pydantic type error expected, in OpenAI's words.
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}
_GOT: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"),  # before int: a bool is an int to Python
    (int, "an integer"),
    (float, "a decimal"),
    (str, "a string"),
    (list, "an array"),
    (dict, "an object"),
    (type(None), "null"),
)
_LOC_ROOTS = ("body", "query", "header", "path")


def _path_of(error: Mapping[str, Any], body: Any) -> list[str | int]:
    """The error's location in the request, without pydantic's union-member tags.

    A tag ("str", "list[TextPart]", ...) is a step the request does not have;
    only a missing field's own name may be absent from the request.
    """
    loc = list(error.get("loc", ()))
    if loc and loc[0] in _LOC_ROOTS:
        loc = loc[1:]
    path: list[str | int] = []
    current = body
    for i, part in enumerate(loc):
        if isinstance(current, dict) and isinstance(part, str) and part in current:
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            current = current[part]
        elif error.get("type") == "missing" and i == len(loc) - 1 and isinstance(current, dict):
            pass
        else:
            continue
        path.append(part)
    return path


def _param_of(path: list[str | int]) -> str | None:
    if not path:
        return None
    text = str(path[0])
    for part in path[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _expected(error: Mapping[str, Any]) -> str | None:
    ctx = error.get("ctx") or {}
    return ctx.get("expected_type") or _EXPECTED.get(str(error.get("type")))


def _got(value: Any) -> str:
    return next((name for kind, name in _GOT if isinstance(value, kind)), "a value")


def validation_error(exc: RequestValidationError) -> ApiError:
    """The deepest validation failure, naming its field the way OpenAI does.

    A union's members each report an error; the deepest one is where the
    request went wrong (messages[0].content[1].text, not messages[0].content).
    Wrong JSON types read as OpenAI's: "Invalid type for 'max_tokens':
    expected an integer, but got a string instead.", code "invalid_type".
    """
    errors = list(exc.errors()) or [{"loc": (), "msg": "invalid request"}]
    paths = [_path_of(e, exc.body) for e in errors]
    deepest = max(range(len(errors)), key=lambda i: len(paths[i]))  # the first of the deepest
    here = [e for e, p in zip(errors, paths, strict=True) if p == paths[deepest]]
    param = _param_of(paths[deepest])
    expected = [_expected(e) for e in here]
    if param and all(expected):
        wanted = " or ".join(dict.fromkeys(x for x in expected if x))
        got = _got(here[0].get("input"))
        msg = f"Invalid type for '{param}': expected {wanted}, but got {got} instead."
        return invalid(msg, param=param, code="invalid_type")
    msg = str(errors[deepest].get("msg", "invalid value"))
    return invalid(f"{param}: {msg}" if param else msg, param=param)


def install_handlers(app: FastAPI, shapes: ErrorShapes | None = None) -> None:
    """Route every error through `ApiError` so the body shape never varies within an API;
    `shapes` names the routes whose API writes errors its own way (Anthropic's)."""
    shapes = shapes or {}

    def respond(request: Request, err: ApiError) -> JSONResponse:
        return err.response(shape_for(request.url.path, shapes))

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return respond(request, exc)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return respond(request, validation_error(exc))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return respond(request, ApiError(exc.status_code, str(exc.detail), code=code))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        return respond(request, from_engine_error(exc, retry_after_s=1))

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
