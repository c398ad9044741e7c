"""Schemathesis against the standalone server's own OpenAPI schema: no input gives a 5xx.

A real server on 127.0.0.1 (the tiny Qwen3, at most 16 completion tokens)
gets schema-valid and schema-violating requests for every operation; each
answer must be below 500, and every error must have its API's shape (OpenAI's,
Anthropic's on `/v1/messages`). The
run is bounded by `MAX_EXAMPLES` per operation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from deploy_testkit import MODEL, TINY_ENGINE
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from deployments.api.settings import ApiSettings
from deployments.api.standalone import background_server, standalone_app

MAX_EXAMPLES = 40
SETTINGS = ApiSettings(max_tokens_limit=16, default_max_tokens=4, request_timeout_s=20)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FastAPI, str]]:
    app = standalone_app(TINY_ENGINE, SETTINGS)
    with background_server(app) as url:
        yield app, url


@pytest.fixture(scope="module")
def api_schema(served: tuple[FastAPI, str]) -> Any:
    return schemathesis.openapi.from_url(f"{served[1]}/openapi.json")


OPERATIONS = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/messages"),  # Anthropic's (deployments/api/anthropic)
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/responses"),  # OpenAI's Responses API (deployments/api/responses_api)
    ("GET", "/v1/responses/{response_id}"),
    ("DELETE", "/v1/responses/{response_id}"),
    ("GET", "/v1/responses/{response_id}/input_items"),
    ("GET", "/v1/models"),
    ("GET", "/health"),
    ("GET", "/ready"),
    ("POST", "/v1/penelope/sessions/{session_id}"),  # a harness's hints between turns
    ("GET", "/metrics"),
    # SGLang's metadata probes, for sgl-router (deployments/api/sglang_probes.py)
    ("GET", "/server_info"),
    ("GET", "/get_server_info"),
    ("GET", "/model_info"),
    ("GET", "/get_model_info"),
]


def test_the_schema_lists_exactly_the_operations_fuzzed_here(api_schema: Any) -> None:
    found = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    assert found == set(OPERATIONS)


# Operations without parameters or a body have no schema-violating input to send.
CASES = [(m, p, GenerationMode.POSITIVE) for m, p in OPERATIONS] + [
    (m, p, GenerationMode.NEGATIVE) for m, p in OPERATIONS if m == "POST"
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=lambda v: getattr(v, "value", v))
def test_no_input_gives_a_server_error(
    api_schema: Any, method: str, path: str, mode: GenerationMode
) -> None:
    @given(case=api_schema[path][method].as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        if mode is GenerationMode.POSITIVE and isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = MODEL  # reach the engine, not only the unknown-model 404
        response = case.call(timeout=30)
        assert response.status_code < 500, (case.body, response.status_code, response.text[:500])
        if response.status_code >= 400 and path.startswith("/v1/messages"):
            body = response.json()  # Anthropic's shape
            assert body["type"] == "error" and {"type", "message"} <= set(body["error"])
        elif response.status_code >= 400:
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}

    check()


# Inputs schemathesis found that used to kill the engine's step loop (a 503 for
# every request in flight): NaN probabilities, an empty top-p nucleus, a seed
# torch cannot take.
FOUND = [
    ({"temperature": 1e-300}, 200),
    ({"top_p": 5e-324}, 200),
    ({"temperature": 0.5, "top_p": 1e-30}, 200),
    ({"seed": 2**64}, 400),
]


@pytest.mark.parametrize(("extra", "status"), FOUND)
def test_sampling_edge_values_found_by_schemathesis(
    served: tuple[FastAPI, str], extra: dict[str, Any], status: int
) -> None:
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 3, **extra}
    r = httpx.post(f"{served[1]}/v1/completions", json=body, timeout=30)
    assert r.status_code == status, r.text
    assert served[0].state.penelope.backend.restarts == 0


def test_the_engine_is_idle_and_intact_after_the_run(served: tuple[FastAPI, str]) -> None:
    engine = served[0].state.penelope.backend.engine
    stats = engine.stats()
    assert (stats.running, stats.queue_length) == (0, 0)
    assert served[0].state.penelope.backend.restarts == 0
    engine.check_integrity()
