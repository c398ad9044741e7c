"""`POST /v1/responses`, `GET` / `DELETE /v1/responses/{id}` and `GET .../{id}/input_items`.

`POST` reads the chain that `previous_response_id` continues (`store`),
names the session (`translate.session_of`), translates the request into the
chat request of the other routes (`translate.to_chat`) and runs it through the
same `deployments.api.prepare` and `deployments.api.run` path: the same
engine request, routing (the session id), hints, ledger and metrics. Only the
reply is written this API's way (`replies.ResponsesReplies`); with `store`
(true unless the request says false) the finished response is stored with its
chain, its input items each with an id (`input_items`). Errors are OpenAI's
shape. An unknown, expired or other tenant's `previous_response_id` is a 400
naming it; `GET` / `DELETE` of such an id, or its input items, a 404. The
routes sit on the app of `deployments.api.app`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from deployments.api.backend import Backend
from deployments.api.errors import ApiError, invalid
from deployments.api.prepare import Caller, prepare_chat
from deployments.api.responses_api.input_items import ListQuery, as_stored, input_items
from deployments.api.responses_api.replies import Draft, ResponsesReplies, public_id
from deployments.api.responses_api.schemas import ITEMS, DroppedItem, Item, ResponsesRequest
from deployments.api.responses_api.store import ResponseStore, StoredResponse
from deployments.api.responses_api.translate import responses_params, session_of, to_chat
from deployments.api.run import CompletionHandler
from deployments.api.settings import ApiSettings

ROUTE = "/v1/responses"


def add_responses_routes(
    app: FastAPI,
    ready_backend: Callable[[], Backend],
    settings: ApiSettings,
    runner: CompletionHandler,
    caller: Callable[[Request], Caller],  # the app's dependency: tenant, session, hints
    store: ResponseStore,
) -> None:
    who_is = Depends(caller)

    @app.post(ROUTE, response_model=None)
    async def create(body: ResponsesRequest, request: Request, who: Caller = who_is) -> Response:
        backend = ready_backend()
        chain = await _chain(store, who.tenant, body.previous_response_id)
        chain_items = _items(chain) if chain is not None else []
        session = session_of(body, request.headers, chain.session if chain else None)
        with responses_params(body):
            chat = to_chat(body, chain_items, session)
            named = replace(who, session_id=session)
            prepared = await prepare_chat(chat, named, backend, settings, "resp")
        draft = Draft(public_id(prepared), body, int(time.time()))
        items = [*(chain.items if chain else []), *map(as_stored, _dumped(body.items()))]

        async def finished(response: dict[str, Any]) -> None:
            if body.store and response["status"] != "failed":
                record = StoredResponse(draft.id, session, items + response["output"], response)
                await asyncio.to_thread(store.put, who.tenant, record)

        replies = ResponsesReplies(draft, finished)
        reply = await runner.run(prepared, backend, request, replies)
        if replies.finished is not None:  # a reply that was not streamed
            await finished(replies.finished)
        return reply

    @app.get(ROUTE + "/{response_id}")
    async def retrieve(response_id: str, who: Caller = who_is) -> JSONResponse:
        record = await asyncio.to_thread(store.get, who.tenant, response_id)
        if record is None:
            raise _not_found(response_id)
        return JSONResponse(record.response)

    @app.get(ROUTE + "/{response_id}/input_items")
    async def list_input_items(
        response_id: str, request: Request, who: Caller = who_is
    ) -> JSONResponse:
        query = ListQuery.of(request.query_params)
        record = await asyncio.to_thread(store.get, who.tenant, response_id)
        if record is None:
            raise _not_found(response_id)
        return JSONResponse(query.page(input_items(record)))

    @app.delete(ROUTE + "/{response_id}")
    async def delete(response_id: str, who: Caller = who_is) -> JSONResponse:
        if not await asyncio.to_thread(store.delete, who.tenant, response_id):
            raise _not_found(response_id)
        return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})


async def _chain(store: ResponseStore, tenant: str, previous: str | None) -> StoredResponse | None:
    if previous is None:
        return None
    record = await asyncio.to_thread(store.get, tenant, previous)
    if record is None or _items_or_none(record) is None:
        raise invalid(
            f"previous_response_id: Previous response with id {previous!r} not found "
            "(unknown, expired, deleted, or stored with store: false).",
            "previous_response_id",
            code="previous_response_not_found",
        )
    return record


def _items_or_none(record: StoredResponse) -> list[Item] | None:
    try:
        return list(ITEMS.validate_python(record.items))
    except ValidationError:
        return None


def _items(record: StoredResponse) -> list[Item]:
    items = _items_or_none(record)
    assert items is not None  # checked by _chain
    return items


def _dumped(items: list[Item]) -> list[dict[str, Any]]:
    return [
        i.model_dump(mode="json", by_alias=True) for i in items if not isinstance(i, DroppedItem)
    ]


def _not_found(response_id: str) -> ApiError:
    return ApiError(
        404, f"Response with id {response_id!r} not found.", param="response_id", code="not_found"
    )
