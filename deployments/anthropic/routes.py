"""`POST /v1/messages` and `POST /v1/messages/count_tokens` on the app of `deployments.api`.

Both translate the request (`translate.to_chat`) into the chat request the
OpenAI route builds, and `/v1/messages` runs it through the same
`deployments.prepare` and `deployments.completions` path: the same engine
request, routing (the session id), hints, ledger and metrics. Only the reply
is written Anthropic's way (`replies.AnthropicReplies`). The caller is
authenticated as on the OpenAI routes, by `x-api-key` or a bearer token;
`anthropic-version` is accepted and not needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from deployments.anthropic.errors import error_body
from deployments.anthropic.replies import AnthropicReplies
from deployments.anthropic.schemas import CountTokensRequest, MessagesRequest
from deployments.anthropic.session import session_of
from deployments.anthropic.translate import to_chat
from deployments.backend import Backend
from deployments.completions import CompletionHandler
from deployments.errors import BodyOf
from deployments.prepare import Caller, check_model, prepare_chat, render_chat
from deployments.settings import ApiSettings

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
        translated = to_chat(body, ids, _template(backend))
        named: Caller = replace(who, session_header=ids.session)
        prepared = await prepare_chat(
            translated.chat,
            named,
            backend,
            settings,
            translated.prompt,
            id_prefix="msg",
            max_tokens_is_ceiling=True,
        )
        replies = AnthropicReplies(translated.cache_control, translated.parser)
        return await runner.run(prepared, backend, request, replies)

    @app.post(f"{ROUTE}/count_tokens", dependencies=[who_is])
    async def count_tokens(body: CountTokensRequest, request: Request) -> JSONResponse:
        backend = ready_backend()
        check_model(body.model, backend)
        translated = to_chat(body, session_of(body, request.headers), _template(backend))
        ids = await render_chat(translated.prompt, backend)
        return JSONResponse({"input_tokens": len(ids)})


def _template(backend: Backend) -> str | None:
    return getattr(backend.tokenizer, "chat_template", None)
