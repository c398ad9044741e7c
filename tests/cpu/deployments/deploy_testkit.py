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
# The longest answer the tiny pool serves beside a short prompt: the window served is what
# the device pool holds (512 pages x 4 tokens), and prompt + max_tokens past it is a 400.
# On the tiny model it decodes for seconds, so a short timeout always fires mid-generation.
LONG_ANSWER = TINY_ENGINE.cache.device_pages * TINY_ENGINE.cache.page_size - 128


async def open_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the app's ASGI interface, inside the app's lifespan."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://penelope") as client:
            yield client
