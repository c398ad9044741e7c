"""Reply parsers: the Hermes/Qwen and Llama 3 JSON formats, whole and streamed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deployments.api.tools.parsers import (
    HermesParser,
    Llama3JsonParser,
    get_parser,
    parser_for_template,
)
from deployments.api.tools.streaming import joined, stream_events
from deployments.api.tools.types import ArgsDelta, CallStart, TextDelta, ToolsError

HERMES = HermesParser()
LLAMA = Llama3JsonParser()

TWO_CALLS = (
    "Let me check. <tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "when": {"day": "today}"}}}\n'
    "</tool_call>\n<tool_call>\n"
    '{"arguments": {"path": "a.py"}, "name": "read_file"}\n</tool_call>'
)
LLAMA_CALLS = (
    '<|python_tag|>{"name": "search", "parameters": {"q": "kv ; cache"}}; '
    '{"name": "read_file", "parameters": {}}'
)


def _calls(reply) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in reply.calls]


def test_hermes_splits_text_from_its_calls() -> None:
    reply = HERMES.parse(TWO_CALLS)
    assert reply.content == "Let me check."
    assert _calls(reply) == [
        ("get_weather", {"city": "Paris", "when": {"day": "today}"}}),
        ("read_file", {"path": "a.py"}),
    ]
    assert reply.finish_reason == "tool_calls"
    assert len({c.id for c in reply.calls}) == 2 and all(
        c.id.startswith("call_") for c in reply.calls
    )


def test_a_reply_without_calls_is_all_content() -> None:
    for parser in (HERMES, LLAMA):
        reply = parser.parse("The answer is 42.")
        assert reply.content == "The answer is 42." and reply.calls == ()
        assert reply.finish_reason is None


@pytest.mark.parametrize(
    "text",
    [
        "I would call <tool_call>{not json}</tool_call> now",
        '<tool_call>{"arguments": {}}</tool_call>',  # no name
        '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>',  # arguments not an object
        "<tool_call>",
    ],
)
def test_hermes_text_that_only_looks_like_a_call_is_content(text: str) -> None:
    reply = HERMES.parse(text)
    assert reply.content == text and reply.calls == ()
    assert joined(stream_events(HERMES, [text])) == {"content": text, "calls": []}


def test_a_call_cut_short_is_content_whole_and_never_an_error_streamed() -> None:
    text = 'Hm <tool_call>{"name": "f", "arguments": {"a": 1}'  # max_tokens cut it
    assert HERMES.parse(text).content == text
    streamed = joined(stream_events(HERMES, [text[:20], text[20:]]))  # its name went out
    assert streamed["content"] == "Hm " and streamed["calls"][0]["name"] == "f"


def test_an_unclosed_last_hermes_call_with_whole_json_is_a_call() -> None:
    reply = HERMES.parse('<tool_call>\n{"name": "f", "arguments": {"a": 1}}')
    assert _calls(reply) == [("f", {"a": 1})]


def test_arguments_given_as_a_json_string_are_decoded() -> None:
    reply = HERMES.parse('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert _calls(reply) == [("f", {"a": 1})]


def test_llama3_json_reads_calls_separated_by_semicolons() -> None:
    reply = LLAMA.parse(LLAMA_CALLS)
    assert reply.content == ""
    assert _calls(reply) == [("search", {"q": "kv ; cache"}), ("read_file", {})]


@pytest.mark.parametrize("text", ['{"name": "f", "parameters": {', '{"x": 1}', "{oops}", "Hi {"])
def test_llama3_bad_json_is_content(text: str) -> None:
    assert LLAMA.parse(text).content == text
    assert LLAMA.parse(text).calls == ()


def test_format_call_round_trips_through_parse() -> None:
    for parser in (HERMES, LLAMA):
        call = parser.parse(TWO_CALLS if parser is HERMES else LLAMA_CALLS).calls[0]
        again = parser.parse(parser.format_call(call)).calls[0]
        assert (again.name, json.loads(again.arguments)) == (call.name, json.loads(call.arguments))


def test_parsers_are_chosen_by_name_or_by_the_chat_template() -> None:
    assert get_parser("llama3_json").name == "llama3_json"
    with pytest.raises(ToolsError, match="hermes, llama3_json"):
        get_parser("mistral")
    assert parser_for_template("auto", "{{ '<|python_tag|>' }}").name == "llama3_json"
    assert parser_for_template("auto", "{% for tool in tools %}<tool_call>").name == "hermes"
    assert parser_for_template("auto", None).name == "hermes"
    assert parser_for_template("llama3_json", "<tool_call>").name == "llama3_json"


def test_streaming_sends_the_id_and_name_before_any_argument_piece() -> None:
    pieces = [TWO_CALLS[i : i + 5] for i in range(0, len(TWO_CALLS), 5)]
    events = stream_events(HERMES, pieces)
    first_args = next(i for i, e in enumerate(events) if isinstance(e, ArgsDelta))
    first_start = next(i for i, e in enumerate(events) if isinstance(e, CallStart))
    assert first_start < first_args
    assert sum(isinstance(e, ArgsDelta) and e.index == 0 for e in events) > 3  # in pieces
    starts = [e for e in events if isinstance(e, CallStart)]
    assert [(s.index, s.name) for s in starts] == [(0, "get_weather"), (1, "read_file")]


def test_streaming_holds_back_a_partial_opening_tag() -> None:
    events = stream_events(HERMES, ["Hello <tool", "_call>", '{"name": "f", "arguments": {}}'])
    text = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(text) == "Hello " and all("<" not in t for t in text)
    events = stream_events(HERMES, ["a <to", "ast> b"])  # a tag it was not
    assert joined(events) == {"content": "a <toast> b", "calls": []}


def _same(parser, text: str, cuts: list[int]) -> None:
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    got = joined(stream_events(parser, pieces))
    want = parser.parse(text)
    assert [(c["name"], json.loads(c["arguments"])) for c in got["calls"]] == _calls(want)
    if not want.calls:
        assert got["content"] == text


@settings(deadline=None)  # a shared machine
@given(st.lists(st.integers(0, len(TWO_CALLS)), max_size=12))
def test_hermes_streams_the_same_calls_however_the_text_is_cut(cuts: list[int]) -> None:
    _same(HERMES, TWO_CALLS, cuts)


@settings(deadline=None)  # a shared machine
@given(st.lists(st.integers(0, len(LLAMA_CALLS)), max_size=12))
def test_llama3_streams_the_same_calls_however_the_text_is_cut(cuts: list[int]) -> None:
    _same(LLAMA, LLAMA_CALLS, cuts)


BAD = 'Try <tool_call>\n{"name": "f", "arguments": {oops}}\n</tool_call> then'


@settings(deadline=None)  # a shared machine
@given(st.lists(st.integers(0, len(BAD)), max_size=8))
def test_a_streamed_bad_call_whose_name_went_out_never_raises(cuts: list[int]) -> None:
    bounds = sorted({*cuts, 0, len(BAD)})
    events = stream_events(HERMES, [BAD[a:b] for a, b in zip(bounds, bounds[1:])])
    assert joined(events)["content"].startswith("Try ")
