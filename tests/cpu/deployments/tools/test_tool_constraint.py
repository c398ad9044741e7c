"""Output constraints: grammars for JSON and forced calls; 400s naming what they cannot enforce."""

from __future__ import annotations

import json

import llguidance
import numpy as np
import pytest

from deployments.api.tools.constraint import check_tool_schemas, json_object, json_schema, tool_call
from deployments.api.tools.parsers import HermesParser, Llama3JsonParser
from deployments.api.tools.types import ToolChoice, ToolDef, ToolsError
from penelope_engine.model.registry import qwen3_tokenizer

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    ToolDef("get_weather", "", CITY),
    ToolDef("ping", "", {"type": "object", "properties": {}}),
]


@pytest.fixture(scope="module")
def lltok() -> llguidance.LLTokenizer:
    tok = qwen3_tokenizer()
    return llguidance.LLTokenizer(tok.backend.to_str(), eos_token=list(tok.eos_token_ids))


def _accepts(lltok: llguidance.LLTokenizer, grammar: str, text: str) -> bool:
    """Whether the grammar's masks let exactly `text` through, token by token."""
    m = llguidance.LLMatcher(lltok, grammar, log_level=0)
    for t in lltok.tokenize_str(text):
        bits = np.unpackbits(np.frombuffer(m.compute_bitmask(), np.uint8), bitorder="little")
        if not bits[t] or not m.consume_token(t):
            return False
    return m.is_accepting()


def test_json_object_takes_an_object_only(lltok: llguidance.LLTokenizer) -> None:
    g = json_object().grammar
    assert _accepts(lltok, g, '{"a": [1, 2]}')
    assert not _accepts(lltok, g, "[1, 2]")
    assert not _accepts(lltok, g, "hello")


def test_json_schema_enforces_the_schema(lltok: llguidance.LLTokenizer) -> None:
    g = json_schema(CITY, "response_format.json_schema.schema").grammar
    assert _accepts(lltok, g, '{"city": "Oslo"}')
    assert not _accepts(lltok, g, '{"city": "Rome"}')
    assert not _accepts(lltok, g, '{"town": "Oslo"}')


def test_an_unsupported_schema_feature_is_named() -> None:
    with pytest.raises(ToolsError, match=r"\"if\"") as err:
        json_schema(
            {"type": "object", "if": {"required": ["a"]}}, "response_format.json_schema.schema"
        )
    assert err.value.param == "response_format.json_schema.schema"
    with pytest.raises(ToolsError) as err:
        check_tool_schemas([TOOLS[0], ToolDef("bad", "", {"$ref": "#/nowhere"})])
    assert err.value.param == "tools[1].function.parameters"
    assert "nowhere" in err.value.message


def test_a_forced_hermes_call_matches_the_qwen_tool_call_token(
    lltok: llguidance.LLTokenizer,
) -> None:
    tok = qwen3_tokenizer()
    one_call = ToolChoice("required", parallel=False)
    g = tool_call(TOOLS, one_call, HermesParser(), tok.added_tokens).grammar
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert _accepts(lltok, g, good)
    assert _accepts(lltok, g, '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>')
    assert not _accepts(lltok, g, good.replace("Paris", "Rome"))
    assert not _accepts(lltok, g, "Sure! " + good)
    assert not _accepts(lltok, g, good + "\n" + good)  # one call: not parallel


def test_a_named_choice_allows_that_tool_alone(lltok: llguidance.LLTokenizer) -> None:
    added = qwen3_tokenizer().added_tokens
    g = tool_call(TOOLS, ToolChoice("named", "ping"), HermesParser(), added).grammar
    assert _accepts(lltok, g, '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>')
    weather = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert not _accepts(lltok, g, weather)


def test_parallel_calls_are_allowed_when_asked(lltok: llguidance.LLTokenizer) -> None:
    added = qwen3_tokenizer().added_tokens
    g = tool_call(TOOLS, ToolChoice("required", parallel=True), HermesParser(), added).grammar
    one = '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'
    assert _accepts(lltok, g, one + "\n" + one)


def test_a_tag_that_is_no_token_is_matched_as_text() -> None:
    """SmolLM2 has no <tool_call> token: its letters are matched, over its own vocabulary."""
    from penelope_engine.model.gguf_loader import converted_dir, find_smollm2_gguf
    from penelope_engine.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(converted_dir(find_smollm2_gguf()))
    assert "<tool_call>" not in tok.added_tokens
    lltok = llguidance.LLTokenizer(tok.backend.to_str(), eos_token=list(tok.eos_token_ids))
    g = tool_call(TOOLS, ToolChoice("required"), HermesParser(), tok.added_tokens).grammar
    assert _accepts(lltok, g, '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>')


def test_a_forced_llama3_call_is_its_json(lltok: llguidance.LLTokenizer) -> None:
    g = tool_call(TOOLS, ToolChoice("named", "get_weather"), Llama3JsonParser()).grammar
    text = json.dumps({"name": "get_weather", "parameters": {"city": "Oslo"}})
    assert _accepts(lltok, g, text)
    assert not _accepts(lltok, g, text.replace("parameters", "arguments"))
