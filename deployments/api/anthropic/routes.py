"""`POST /v1/messages` and `POST /v1/messages/count_tokens` on the app of `deployments.api.app`.

Both translate the request (`translate.to_chat`) into the chat request the
OpenAI route builds, and `/v1/messages` runs it through the same
`deployments.api.prepare` and `deployments.api.run` path: the same engine
request, routing (the session id), hints, ledger and metrics. Only the reply
is written Anthropic's way (`replies.AnthropicReplies`). The caller is
authenticated as on the OpenAI routes, by `x-api-key` or a bearer token;
`anthropic-version` is accepted and not needed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from deployments.api.anthropic.errors import error_body
from deployments.api.anthropic.replies import AnthropicReplies
from deployments.api.anthropic.schemas import CountTokensRequest, MessagesRequest
from deployments.api.anthropic.session import session_of
from deployments.api.anthropic.translate import to_chat
from deployments.api.backend import Backend
from deployments.api.errors import ApiError, BodyOf
from deployments.api.prepare import Caller, chat_prompt_ids, check_model, prepare_chat
from deployments.api.run import CompletionHandler
from deployments.api.settings import ApiSettings

ROUTE = "/v1/messages"
ERROR_SHAPES: dict[str, BodyOf] = {ROUTE: error_body}  # for `errors.install_handlers`


def add_anthropic_routes(
    app: FastAPI,
    ready_backend: Callable[[], Backend],
    settings: ApiSettings,
    runner: CompletionHandler,
    caller: Callable[[Request], Caller],  # the app's dependency: tenant, session, hints
) -> None:
    who_is = Depends(caller)

    @app.post(ROUTE, response_model=None)
    async def messages(body: MessagesRequest, request: Request, who: Caller = who_is) -> Response:
        backend = ready_backend()
        ids = session_of(body, request.headers)
        translated = to_chat(body, ids)
        named: Caller = replace(who, session_id=ids.session)
        with anthropic_params():
            prepared = await prepare_chat(
                translated.chat, named, backend, settings, "msg", max_tokens_is_ceiling=True
            )
        replies = AnthropicReplies(translated.cache_control)
        return await runner.run(prepared, backend, request, replies)

    @app.post(f"{ROUTE}/count_tokens", dependencies=[who_is])
    async def count_tokens(body: CountTokensRequest, request: Request) -> JSONResponse:
        backend = ready_backend()
        check_model(body.model, backend)
        translated = to_chat(body, session_of(body, request.headers))
        with anthropic_params():
            ids, _ = await chat_prompt_ids(translated.chat, backend, settings)
        return JSONResponse({"input_tokens": len(ids)})


_OPENAI_PARAMS = (
    (re.compile(r"^tools\[(\d+)\]\.function\.parameters"), r"tools[\1].input_schema"),
    (re.compile(r"^tools\[(\d+)\]\.function\.name"), r"tools[\1].name"),
)


@contextmanager
def anthropic_params() -> Iterator[None]:
    """Errors of the shared chat path name OpenAI's fields; rename them to Anthropic's."""
    try:
        yield
    except ApiError as err:
        if err.param:
            for pattern, name in _OPENAI_PARAMS:
                renamed = pattern.sub(name, err.param)
                if renamed != err.param:
                    err.message = err.message.replace(err.param, renamed)
                    err.param = renamed
                    break
        raise
