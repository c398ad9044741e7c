"""Fixtures of the deployment tests: apps over fresh engines sharing the tiny Qwen3."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from deploy_testkit import TINY_ENGINE, open_client
from fastapi import FastAPI

from deployments.api.app import create_app
from deployments.api.backend import LocalBackend
from deployments.api.settings import ApiSettings
from penelope_engine.async_engine import AsyncEngine
from penelope_engine.model.registry import LoadedModel


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def make_app(tiny_qwen3: LoadedModel) -> Callable[..., FastAPI]:
    """An app over a fresh engine (empty cache) that shares the loaded weights."""

    def make(settings: ApiSettings | None = None) -> FastAPI:
        return create_app(
            lambda: LocalBackend(AsyncEngine(TINY_ENGINE, loaded=tiny_qwen3)), settings
        )

    return make


@pytest.fixture
async def client(make_app: Callable[..., FastAPI]) -> AsyncIterator[httpx.AsyncClient]:
    async for c in open_client(make_app()):
        yield c
