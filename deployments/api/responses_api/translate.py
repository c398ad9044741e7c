"""A Responses request (and the stored chain it continues) as the internal chat request.

`to_chat` checks what the schema cannot, naming the Responses field in each
400: a `function_call_output` needs a `function_call` with its `call_id`
earlier in the input or in the stored chain; a call's `arguments` are a JSON
object; the input keeps at least one item the model can read. It then builds
the `ChatCompletionRequest` that the chat route, the Anthropic route and this
one share, so `deployments.api.prepare` and `deployments.api.chat_tools` treat
it exactly as a chat request (tools rendered at the top of the prompt,
`tool_choice` and `text.format` through the same grammar path):

    instructions              -> a system message, first
    message (any role)        -> a message of that role (developer renders as system)
    function_call             -> a tool call of the assistant message just before it,
                                 or of a new assistant message
    function_call_output      -> a tool message answering its call_id
    dropped item / part types -> nothing (`schemas` lists them)
    function tools            -> tools; other tool types are skipped
    text.format               -> response_format (json_object, json_schema)
    max_output_tokens         -> max_tokens

Errors of the shared chat path name chat fields; `responses_params` renames them.

The session, first that is present (`session_of`): the `x-session-id` header;
`prompt_cache_key` (Codex sets it to its session id on every request); the
session of the stored response that `previous_response_id` continues; the
conversation itself (`resp-conv-` and a digest of the instructions and the
first input item).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from deployments.api.errors import ApiError, invalid
from deployments.api.responses_api.schemas import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    Item,
    MessageItem,
    NamedFunctionChoice,
    ResponsesRequest,
)
from deployments.api.schemas import (
    ChatCompletionRequest,
    ChatMessage,
    FunctionCall,
    FunctionDef,
    JsonSchemaFormat,
    NamedFunction,
    NamedToolChoice,
    ResponseFormat,
    Tool,
    ToolCallPart,
)
from deployments.api.sessions import header_session, named_session


def session_of(
    body: ResponsesRequest, headers: Mapping[str, str], chain_session: str | None
) -> str:
    """The request's session, by the rule in the module doc (ids as `api.sessions` says)."""
    header = header_session(headers)
    if header:
        return header
    cache_key = named_session(body.prompt_cache_key, "prompt_cache_key")
    if cache_key:
        return cache_key
    if chain_session:
        return chain_session
    digest = hashlib.sha256((body.instructions or "").encode() + b"\x00")
    first = body.items()[0]
    digest.update(json.dumps(first.model_dump(mode="json"), sort_keys=True).encode())
    return "resp-conv-" + digest.hexdigest()[:24]


def to_chat(body: ResponsesRequest, chain: Sequence[Item], session: str) -> ChatCompletionRequest:
    """The chat request of `body` continuing `chain` (the stored items, oldest first)."""
    items = [*chain, *body.items()]
    _check_calls(items, len(chain))
    messages = [ChatMessage(role="system", content=body.instructions)] if body.instructions else []
    messages += _messages(items)
    if not messages:
        raise invalid("input has no item the model can read (every item's type is dropped)",
                      "input")  # fmt: skip
    fields: dict[str, Any] = {
        "model": body.model,
        "messages": messages,
        "max_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "stream": body.stream,
        "parallel_tool_calls": body.parallel_tool_calls,
        "session_id": session,
    }
    tools = [t for t in body.tools or () if isinstance(t, FunctionTool)]
    if tools:
        fields["tools"] = [_tool(t) for t in tools]
    if body.tool_choice is not None:
        fields["tool_choice"] = _choice(body.tool_choice)
    if body.text is not None and body.text.format is not None:
        fields["response_format"] = _format(body)
    if body.penelope is not None:
        fields["penelope"] = body.penelope
    return ChatCompletionRequest(**fields)


def _messages(items: Sequence[Item]) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    calls_open = False  # the last message is an assistant message that may take more calls
    for item in items:
        if isinstance(item, MessageItem):
            out.append(ChatMessage(role=item.role, content=item.text()))
            calls_open = item.role == "assistant"
        elif isinstance(item, FunctionCallItem):
            fn = FunctionCall(name=item.name, arguments=item.arguments)
            call = ToolCallPart(id=item.call_id, type="function", function=fn)
            if calls_open:
                last = out[-1]
                out[-1] = last.model_copy(update={"tool_calls": [*(last.tool_calls or ()), call]})
            else:
                out.append(ChatMessage(role="assistant", content=None, tool_calls=[call]))
                calls_open = True
        elif isinstance(item, FunctionCallOutputItem):
            out.append(ChatMessage(role="tool", content=item.text(), tool_call_id=item.call_id))
            calls_open = False
    return out


def _check_calls(items: Sequence[Item], chained: int) -> None:
    """Each output answers an earlier call; each call's arguments are a JSON object."""
    called: set[str] = set()
    for i, item in enumerate(items):
        param = f"input[{i - chained}]"
        if isinstance(item, FunctionCallItem):
            _check_arguments(item.arguments, f"{param}.arguments", i < chained)
            called.add(item.call_id)
        elif isinstance(item, FunctionCallOutputItem) and item.call_id not in called:
            raise invalid(
                f"No tool call found for function call output with call_id {item.call_id!r}: "
                "no function_call item with that call_id comes before it in the input "
                "(or in the stored response previous_response_id continues)",
                f"{param}.call_id",
            )


def _check_arguments(arguments: str, param: str, stored: bool) -> None:
    if stored:
        return
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        raise invalid(f"{param} is not valid JSON: {exc}", param) from exc
    if not isinstance(args, dict):
        raise invalid(f"{param} must be a JSON object", param)


def _tool(t: FunctionTool) -> Tool:
    fn = FunctionDef(name=t.name, description=t.description, parameters=t.parameters)
    return Tool(type="function", function=fn)


def _choice(choice: str | NamedFunctionChoice) -> str | NamedToolChoice:
    if isinstance(choice, NamedFunctionChoice):
        return NamedToolChoice(type="function", function=NamedFunction(name=choice.name))
    return choice


def _format(body: ResponsesRequest) -> ResponseFormat:
    assert body.text is not None and body.text.format is not None
    f = body.text.format
    if f.type != "json_schema":
        return ResponseFormat(type=f.type)
    if f.schema_ is None:
        raise invalid("text.format of type json_schema needs a schema", "text.format.schema")
    schema = JsonSchemaFormat(
        name=f.name or "response", description=f.description, schema=f.schema_, strict=f.strict
    )
    return ResponseFormat(type="json_schema", json_schema=schema)


_CHAT_PARAMS = (
    (re.compile(r"^response_format\.json_schema\.schema"), "text.format.schema"),
    (re.compile(r"^response_format(\.json_schema)?"), "text.format"),
    (re.compile(r"^messages$"), "input"),
    (re.compile(r"^max_tokens$"), "max_output_tokens"),
)


@contextmanager
def responses_params(body: ResponsesRequest) -> Iterator[None]:
    """Errors of the shared chat path name chat fields: rename them to this API's, and
    name the field in the message too."""
    try:
        yield
    except ApiError as err:
        if err.param:
            renamed = _renamed(err.param, body)
            err.message = err.message.replace(err.param, renamed)
            err.param = renamed
            if renamed not in err.message:
                err.message = f"{renamed}: {err.message}"
        raise


def _renamed(param: str, body: ResponsesRequest) -> str:
    tools = [i for i, t in enumerate(body.tools or ()) if isinstance(t, FunctionTool)]
    found = re.match(r"^tools\[(\d+)\](?:\.function)?(.*)$", param)
    if found:
        k = int(found.group(1))
        return f"tools[{tools[k] if k < len(tools) else k}]{found.group(2)}"
    for pattern, name in _CHAT_PARAMS:
        if pattern.match(param):
            return pattern.sub(name, param)
    return param
