"""Fixtures shared by every CPU test: one torch thread, the tiny Qwen3 loaded once.

Tests run on one thread: with more, any other load on the machine slows a
forward several times (DESIGN.md section 3), and results stay deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:  # imported only by the tests that use these fixtures
    from cache_store import StoreLocation
    from penelope_engine.engine import Engine
    from penelope_engine.model.registry import LoadedModel

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_qwen3() -> LoadedModel:
    """The seeded random-weight tiny Qwen3 in fp32 on CPU, shared by every engine in the run."""
    from penelope_engine.model.registry import load_model

    return load_model("tiny-qwen3")


@pytest.fixture
def make_engine(tiny_qwen3: LoadedModel) -> Callable[..., Engine]:
    """Fresh engines (empty caches) over the shared tiny Qwen3, page size 4 unless told."""

    def make(
        policy: str = "penelope",
        device_pages: int = 256,
        host_pages: int = 0,
        page_size: int = 4,
        **scheduler: int,
    ) -> Engine:
        from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig
        from penelope_engine.engine import Engine

        cache = CacheConfig(page_size, device_pages, host_pages, policy)
        config = EngineConfig(cache=cache, scheduler=SchedulerConfig(**scheduler))
        return Engine(config, loaded=tiny_qwen3)

    return make


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A local S3-compatible server (moto's server mode) on 127.0.0.1, for the whole run."""
    from bench.cluster.s3 import local_s3_server

    with local_s3_server() as url:
        yield url


@pytest.fixture
def s3_store(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> StoreLocation:
    """A fresh bucket on the local S3 server, as a user configures real S3: an s3:// URI,
    the endpoint and region as settings, credentials in the standard environment."""
    from bench.cluster.s3 import CREDENTIALS, new_bucket

    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return new_bucket(s3_endpoint)
