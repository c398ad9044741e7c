"""Faults through the API: an unwritable store, and an engine whose forward pass raises.

The engine fault is a real one: the model raises inside its forward pass
whenever a batch holds a poisoned token id. The step loop fails the requests
of that batch and goes on serving the others with the same engine and cache.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from deploy_testkit import LONG_ANSWER, MODEL, TINY_ENGINE, open_client
from fastapi import FastAPI

from deployments.api.app import create_app
from deployments.api.backend import LocalBackend
from deployments.api.standalone import background_server
from penelope_engine.async_engine import AsyncEngine
from penelope_engine.config import CacheConfig
from penelope_engine.model.registry import LoadedModel

POISON = 4242


class PoisonedDecoder(torch.nn.Module):
    """The real decoder, except that a batch holding `POISON` raises mid-forward."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor, *args: Any) -> torch.Tensor:
        if bool((input_ids == POISON).any()):
            raise RuntimeError("injected fault: poisoned token in the batch")
        return self.inner(input_ids, *args)


def completion(prompt: list[int], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": prompt, "max_tokens": 2, "temperature": 0, **extra}


def session_prompt(i: int, n: int = 60) -> list[int]:
    return [1000 + 97 * i + t for t in range(n)]


@pytest.mark.anyio
async def test_an_unwritable_store_degrades_to_recompute_with_one_warning_and_a_metric(
    tiny_qwen3: LoadedModel, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("the store directory cannot be created under a file")
    cache = CacheConfig(page_size=4, device_pages=32, host_pages=32, store_uri=str(blocker / "kv"))
    config = dataclasses.replace(TINY_ENGINE, cache=cache)
    app = create_app(lambda: LocalBackend(AsyncEngine(config, loaded=tiny_qwen3)))
    caplog.set_level(logging.DEBUG, logger="cache_store")
    async for client in open_client(app):
        for i in range(6):  # 6 sessions x 15 pages overflow device + host: host evictions spill
            body, headers = completion(session_prompt(i)), {"x-session-id": f"s{i}"}
            r = await client.post("/v1/completions", json=body, headers=headers)
            assert r.status_code == 200, r.text
        again = completion(session_prompt(0) + [7, 8, 9, 10])
        r = await client.post("/v1/completions", json=again, headers={"x-session-id": "s0"})
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]["penelope"]
        assert usage["store_tokens"] == 0 and usage["recomputed_tokens"] > 0
        metrics = (await client.get("/metrics")).text
    warnings = [r for r in caplog.records if r.name.startswith("cache_store") and r.levelno >= 30]
    # one warning per kind of call that failed (writes, and reads of the same path)
    said = [r.getMessage() for r in warnings]
    assert 1 <= len(said) <= 2 and len({m.split(" at ")[0] for m in said}) == len(said), said
    assert "recomputed" in warnings[0].getMessage()
    line = next(x for x in metrics.splitlines() if 'kind="write"' in x and "store_errors" in x)
    assert float(line.split()[-1]) > 0


@pytest.fixture
def poisoned_server(tiny_qwen3: LoadedModel) -> Iterator[tuple[FastAPI, str]]:
    loaded = dataclasses.replace(tiny_qwen3, model=PoisonedDecoder(tiny_qwen3.model))
    make = lambda: AsyncEngine(TINY_ENGINE, loaded=loaded)  # noqa: E731
    app = create_app(lambda: LocalBackend(make(), restart=make))
    with background_server(app) as url:
        yield app, url


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_failing_forward_pass_fails_its_requests_cleanly_and_the_server_recovers(
    poisoned_server: tuple[FastAPI, str],
) -> None:
    app, url = poisoned_server
    first_engine = app.state.penelope.backend.engine
    bystander: dict[str, Any] = {}

    def stream_a_long_answer() -> None:
        body = completion(session_prompt(1), max_tokens=LONG_ANSWER, stream=True)
        with httpx.Client(base_url=url, timeout=30) as http:
            r = http.post("/v1/completions", json=body)
            bystander.update(status=r.status_code, lines=r.text.splitlines())

    with httpx.Client(base_url=url, timeout=30) as http:
        thread = threading.Thread(target=stream_a_long_answer)
        thread.start()
        deadline = time.monotonic() + 10
        while first_engine.stats().running == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        r = http.post("/v1/completions", json=completion([1, 2, POISON, 3]))
        thread.join(timeout=30)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "engine_error"
        assert r.headers["retry-after"]
        events = [x for x in bystander["lines"] if x.startswith("data: ")]
        assert bystander["status"] == 200 and events[-1] == "data: [DONE]"
        assert '"code":"engine_error"' in events[-2]  # it shared the failed batch
        assert first_engine.alive
        for i in range(2):  # the same engine serves the next requests
            ok = http.post("/v1/completions", json=completion(session_prompt(i)))
            assert ok.status_code == 200, ok.text
        assert http.get("/health").status_code == 200
    backend = app.state.penelope.backend
    assert backend.restarts == 0 and backend.engine is first_engine and first_engine.alive
    backend.engine.check_integrity()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.anyio
async def test_without_a_restart_factory_the_engine_survives_a_failed_step(
    tiny_qwen3: LoadedModel,
) -> None:
    loaded = dataclasses.replace(tiny_qwen3, model=PoisonedDecoder(tiny_qwen3.model))
    app = create_app(lambda: LocalBackend(AsyncEngine(TINY_ENGINE, loaded=loaded)))
    async for client in open_client(app):
        r = await client.post("/v1/completions", json=completion([POISON]))
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_error", r.text
        for _ in range(2):
            r = await client.post("/v1/completions", json=completion([1, 2, 3]))
            assert r.status_code == 200, r.text
        assert (await client.get("/health")).status_code == 200
