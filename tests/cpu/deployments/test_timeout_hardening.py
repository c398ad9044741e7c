"""Per-request timeouts and client disconnects: the request is aborted, its pages freed at once.

A generation of `LONG_ANSWER` tokens (most of the pool) runs for seconds on the tiny
model, so a short `api.request_timeout_s` always fires mid-generation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from deploy_testkit import LONG_ANSWER, MODEL, TINY_ENGINE, open_client
from fastapi import FastAPI

from deployments.api.settings import ApiSettings
from deployments.api.standalone import background_server, standalone_app
from deployments.ray.serve_config import parse_serve_config
from penelope_engine.errors import ConfigError

LONG = {
    "model": MODEL,
    "prompt": "Write a long story.",
    "max_tokens": LONG_ANSWER,
    "temperature": 0,
}


def assert_no_request_holds_pages(app: FastAPI) -> None:
    """Nothing runs or waits, every device page is in the tree, and the pools add up."""
    engine = app.state.penelope.backend.engine
    stats = engine.stats()
    assert (stats.running, stats.queue_length) == (0, 0), stats
    assert engine.engine.inspect().core.scheduler.request_pages() == 0
    engine.check_integrity()


def sse_events(text: str) -> list[Any]:
    data = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    return [d if d == "[DONE]" else json.loads(d) for d in data]


@pytest.mark.anyio
async def test_a_request_past_its_timeout_gets_504_and_frees_its_pages(
    make_app: Callable[..., FastAPI],
) -> None:
    app = make_app(ApiSettings(request_timeout_s=0.4))
    async for client in open_client(app):
        t0 = time.perf_counter()
        r = await client.post("/v1/completions", json=LONG)
        assert r.status_code == 504, r.text
        assert 0.4 <= time.perf_counter() - t0 < 3.0
        error = r.json()["error"]
        assert (error["type"], error["code"]) == ("timeout_error", "request_timeout")
        assert_no_request_holds_pages(app)
        short = await client.post("/v1/completions", json={**LONG, "max_tokens": 2})
        assert short.status_code == 200, short.text
        metrics = (await client.get("/metrics")).text
        assert "penelope_request_timeouts_total 1.0" in metrics
        assert 'penelope_requests_total{route="/v1/completions",status="504"} 1.0' in metrics


@pytest.mark.anyio
async def test_a_stream_past_its_timeout_ends_with_an_error_event_then_done(
    make_app: Callable[..., FastAPI],
) -> None:
    app = make_app(ApiSettings(request_timeout_s=0.4))
    async for client in open_client(app):
        r = await client.post("/v1/completions", json={**LONG, "stream": True})
        assert r.status_code == 200
        events = sse_events(r.text)
        assert events[-1] == "[DONE]"
        assert events[-2]["error"]["code"] == "request_timeout"
        assert all("choices" in e for e in events[:-2]) and len(events) > 3
        assert_no_request_holds_pages(app)


def test_timeout_is_configurable_in_serve_config_and_must_be_positive_and_finite() -> None:
    assert parse_serve_config({"api": {"request_timeout_s": 30}}).api.request_timeout_s == 30.0
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ConfigError, match="request_timeout_s"):
            ApiSettings(request_timeout_s=bad)


def test_a_client_that_drops_a_stream_frees_its_pages_at_once() -> None:
    app = standalone_app(TINY_ENGINE)
    with background_server(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        with http.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            assert app.state.penelope.backend.engine.stats().running == 1
        deadline = time.monotonic() + 1.0  # the disconnect reaches the server within a poll
        while app.state.penelope.backend.engine.stats().running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert_no_request_holds_pages(app)
        assert "penelope_api_pending_requests 0.0" in http.get("/metrics").text
