"""What the engine checks of a request before it queues it, and how a turn ended.

`check_request` raises `InvalidRequestError` (or `CapacityError` for a prompt the
device pool can never hold) and changes nothing, so a refused request leaves no
trace in the engine. A request's `tool_call_pattern` is compiled here once
(cached), both to refuse a bad regex up front and to read a finished reply:
`turn_stop` says whether the turn ended in a tool call, which the eviction
policies and retention use.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Container

from penelope_engine.config import CacheConfig
from penelope_engine.errors import CapacityError, InvalidRequestError
from penelope_engine.protocol import GenerateRequest
from penelope_engine.sched.sequence import Sequence
from penelope_engine.tokenizer import Tokenizer
from penelope_engine.util import cdiv


@functools.lru_cache(maxsize=64)
def compiled(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidRequestError(f"tool_call_pattern is not a valid regex: {exc}") from exc


def check_request(
    req: GenerateRequest,
    running: Container[str],
    max_model_len: int,
    vocab_size: int,
    cc: CacheConfig,
) -> None:
    """Refuse a request the engine cannot run: an empty or too long prompt, an id already
    `running`, token ids out of the vocabulary, more pages than the device pool has, a
    bad tool-call regex."""
    if not req.prompt_token_ids:
        raise InvalidRequestError("prompt is empty")
    if req.request_id in running:
        raise InvalidRequestError(f"request id {req.request_id!r} is already running")
    n = len(req.prompt_token_ids)
    if n + 1 > max_model_len:
        raise InvalidRequestError(f"prompt has {n} tokens; the model's window is {max_model_len}")
    if min(req.prompt_token_ids) < 0 or max(req.prompt_token_ids) >= vocab_size:
        raise InvalidRequestError(f"prompt token ids must be in [0, {vocab_size})")
    pages = cdiv(n + 1, cc.page_size)
    if pages > cc.device_pages:
        raise CapacityError(f"prompt needs {pages} pages; the device pool has {cc.device_pages}")
    if req.tool_call_pattern is not None:
        compiled(req.tool_call_pattern)


def turn_stop(seq: Sequence, tokenizer: Tokenizer) -> str | None:
    """How `seq`'s turn ended: its hint, else "tool_use" when its completion made a
    tool call (`GenerateRequest.tool_call_pattern`), else "end_turn"; None when the
    request says nothing of tools."""
    req = seq.req
    if req.stop_reason_hint is not None or req.tool_call_pattern is None:
        return req.stop_reason_hint
    text = tokenizer.decode(seq.tokens[seq.prompt_len :], skip_special_tokens=False)
    return "tool_use" if compiled(req.tool_call_pattern).search(text) else "end_turn"
