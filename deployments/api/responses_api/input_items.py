"""A stored response's input items: `GET /v1/responses/{id}/input_items`, OpenAI's list shape.

A stored record's chain (`store.StoredResponse.items`) is every earlier input
and output item, this request's input items, then its output:

    [ chain it continues ......... | this input ... | output ]
    [ input items: what the model read, oldest first | ]

so its input items are the chain without its own output, the continued
chain's items included, as OpenAI lists them (items dropped by the documented
rule of `schemas` left no trace). Each input item is stored in the shape the
list returns (`as_stored`): an id of its own (`msg_`, `fc_`, `fco_`), `status`,
and a string content as one text part; a chain that continues it keeps the
same ids.

    ?limit=1..100 (20)   ?order=desc|asc (desc: newest first)   ?after=<item id>
    ?include=...         accepted, ignored

    {"object": "list", "data": [...], "first_id", "last_id", "has_more"}
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from deployments.api.errors import invalid
from deployments.api.responses_api.store import StoredResponse

ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}
MAX_LIMIT = 100


def as_stored(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as the chain stores it and the list returns it."""
    kind = item.get("type", "message")
    out = {"id": f"{ID_PREFIXES.get(kind, 'item')}_{uuid.uuid4().hex}", **item}
    if kind == "message" and isinstance(item.get("content"), str):
        part = "output_text" if item.get("role") == "assistant" else "input_text"
        out["content"] = [{"type": part, "text": item["content"]}]
    return {**out, "status": "completed"}


def input_items(record: StoredResponse) -> list[dict[str, Any]]:
    """The items the model read for `record`, oldest first, each with an id."""
    items = record.items[: len(record.items) - len(record.response.get("output") or ())]
    return [{**item, "id": item.get("id") or f"item_{i}"} for i, item in enumerate(items)]


@dataclass(frozen=True)
class ListQuery:
    limit: int = 20
    order: Literal["asc", "desc"] = "desc"
    after: str | None = None

    @staticmethod
    def of(params: Mapping[str, str]) -> ListQuery:
        """The query string's paging, or a 400 naming the parameter."""
        raw = params.get("limit", "20")
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
            raise invalid(f"limit must be an integer from 1 to {MAX_LIMIT}, got {raw!r}", "limit")
        order = params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise invalid(f"order must be 'asc' or 'desc', got {order!r}", "order")
        return ListQuery(int(raw), "asc" if order == "asc" else "desc", params.get("after"))

    def page(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """One page of `items` (oldest first) in OpenAI's list shape."""
        ordered = items if self.order == "asc" else items[::-1]
        start = 0
        if self.after is not None:
            ids = [item["id"] for item in ordered]
            if self.after not in ids:
                raise invalid(f"after: no input item of this response has id {self.after!r}",
                              "after")  # fmt: skip
            start = ids.index(self.after) + 1
        data = ordered[start : start + self.limit]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": start + self.limit < len(ordered),
        }
