"""Messages with tools through the chat template: `tools=` where it reads them, else a fallback."""

from __future__ import annotations

import json

import pytest

from deployments.api.tools.parsers import HermesParser
from deployments.api.tools.render import fallback_messages, render_prompt, template_reads_tools
from deployments.api.tools.types import ToolDef
from penelope_engine.model.registry import qwen3_tokenizer
from penelope_engine.tokenizer import Tokenizer

# SmolLM2-135M-Instruct's template: it never mentions tools.
PLAIN_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
WEATHER = ToolDef(
    "get_weather",
    "The weather of a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TURN_1 = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
}
TURN_2 = [
    *TURN_1,
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "content": "sunny, 21C", "tool_call_id": "call_1", "name": "get_weather"},
]


@pytest.fixture(scope="module")
def qwen() -> Tokenizer:
    return qwen3_tokenizer()


@pytest.fixture(scope="module")
def plain(qwen: Tokenizer) -> Tokenizer:
    return Tokenizer(qwen.backend, qwen.eos_token_ids, PLAIN_TEMPLATE)


def test_a_template_that_reads_tools_gets_them_as_hugging_face_passes_them(qwen: Tokenizer) -> None:
    assert template_reads_tools(qwen)
    ids = render_prompt(qwen, TURN_2, [WEATHER], HermesParser())
    texts = [{**m, "content": m["content"] or ""} for m in TURN_2]
    assert ids == qwen.apply_chat_template(texts, True, tools=[WEATHER.as_openai()])
    text = qwen.decode(ids, skip_special_tokens=False)
    assert '"name": "get_weather"' in text and "<tools>" in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert "<tool_response>\nsunny, 21C\n</tool_response>" in text


def test_without_tools_the_prompt_is_the_plain_chat(qwen: Tokenizer) -> None:
    assert render_prompt(qwen, TURN_1, [], HermesParser()) == qwen.apply_chat_template(TURN_1)


def test_the_fallback_writes_tools_calls_and_results_as_text(plain: Tokenizer) -> None:
    assert not template_reads_tools(plain)
    msgs = fallback_messages(TURN_2, [WEATHER], HermesParser())
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[0]["content"].startswith("You may call one or more functions")
    assert msgs[0]["content"].endswith("You are terse.")
    assert json.dumps(WEATHER.as_openai()) in msgs[0]["content"]
    assert HermesParser().parse(msgs[2]["content"]).calls[0].name == "get_weather"
    assert msgs[3]["content"] == "<tool_response>\nsunny, 21C\n</tool_response>"
    text = plain.decode(render_prompt(plain, TURN_2, [WEATHER], HermesParser()))
    assert "<tools>" in text and "sunny, 21C" in text


def test_a_fallback_without_a_system_message_gets_one_first(plain: Tokenizer) -> None:
    msgs = fallback_messages(TURN_1[1:], [WEATHER], HermesParser())
    assert msgs[0]["role"] == "system" and msgs[1] == TURN_1[1]


@pytest.mark.parametrize("which", ["qwen", "plain"])
def test_the_tools_prefix_of_turn_one_is_a_token_prefix_of_turn_two(
    which: str, request: pytest.FixtureRequest
) -> None:
    """What the cache shares between a session's turns: everything up to the new messages."""
    tok: Tokenizer = request.getfixturevalue(which)
    one = render_prompt(tok, TURN_1, [WEATHER], HermesParser())
    two = render_prompt(tok, TURN_2, [WEATHER], HermesParser())
    head = render_prompt(tok, TURN_1[:1], [WEATHER], HermesParser())
    shared = next((i for i, (a, b) in enumerate(zip(one, two)) if a != b), len(one))
    assert shared >= len(head) - 3  # the system block with the tools, less the generation prompt
