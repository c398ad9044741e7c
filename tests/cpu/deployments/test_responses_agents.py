"""The `openai-agents` SDK with its default model (`OpenAIResponsesModel`, no
`set_default_openai_api`) against a real server over SmolLM2-135M: an `Agent` with a Python
function tool runs its loop (call, tool, answer) through `/v1/responses` to the end, and
its second model call is served from the cache over the instructions and the tools."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.models.openai_provider import OpenAIProvider
from fastapi import FastAPI
from openai import AsyncOpenAI
from tool_testkit import SMOLLM2, SMOLLM2_ENGINE, SYSTEM, wait_idle

from deployments.api.settings import ApiSettings
from deployments.api.standalone import background_server, standalone_app
from deployments.api.tools.parsers import HermesParser
from deployments.api.tools.render import render_prompt
from deployments.api.tools.types import ToolDef

pytestmark = pytest.mark.timeout(600)
calls: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather of a city.

    Args:
        city: The city's name.
    """
    calls.append(city)
    return f"18 C and light rain in {city}"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FastAPI, str]]:
    set_tracing_disabled(True)  # nothing leaves the machine
    app = standalone_app(SMOLLM2_ENGINE, ApiSettings())
    with background_server(app) as url:
        yield app, url


def test_an_agent_on_the_default_responses_model_runs_its_tool_loop_with_the_prefix_cached(
    served: tuple[FastAPI, str],
) -> None:
    app, url = served
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
    agent = Agent(
        name="weather",
        instructions=SYSTEM,
        tools=[get_weather],
        model=SMOLLM2,  # a name: the provider's default model class serves it
        # The first turn must call (a 135M model would not always); the SDK resets the
        # choice to auto after a tool ran, so the second turn answers.
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=60),
    )
    config = RunConfig(model_provider=OpenAIProvider(openai_client=client))
    assert isinstance(config.model_provider.get_model(SMOLLM2), OpenAIResponsesModel)
    run = Runner.run(agent, "What is the weather in Paris?", max_turns=4, run_config=config)
    result = asyncio.run(run)
    assert len(calls) == 1 and calls[0]
    assert isinstance(result.final_output, str) and result.final_output
    assert len(result.raw_responses) == 2
    first, second = result.raw_responses
    tokenizer = app.state.penelope.backend.engine.tokenizer
    tool = ToolDef("get_weather", get_weather.description, get_weather.params_json_schema)
    system = [{"role": "system", "content": SYSTEM}]
    generation_prompt = 3  # "<|im_start|>assistant\n"
    prefix = len(render_prompt(tokenizer, system, [tool], HermesParser())) - generation_prompt
    cached = second.usage.input_tokens_details.cached_tokens
    assert prefix > 100 and cached >= prefix, (cached, prefix)
    assert cached >= first.usage.input_tokens - SMOLLM2_ENGINE.cache.page_size
    wait_idle(app)
