"""Constants and helpers shared by the deployment tests (fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI

from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig

MODEL = "tiny-qwen3"
TINY_ENGINE = EngineConfig(
    model=MODEL,
    cache=CacheConfig(page_size=4, device_pages=512),
    scheduler=SchedulerConfig(max_batch_tokens=512, prefill_chunk=256, max_running=8),
)


async def open_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the app's ASGI interface, inside the app's lifespan."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://penelope") as client:
            yield client
