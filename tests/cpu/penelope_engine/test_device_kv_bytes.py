"""`CacheConfig.device_kv_bytes`: the device pool given in bytes holds as many pages as fit at
the KV dtype's width, so a bfloat16 pool holds twice a float32 pool's tokens."""

from __future__ import annotations

import pytest

from penelope_engine.cache_config import CacheConfig
from penelope_engine.config import EngineConfig
from penelope_engine.device_memory import kv_page_bytes
from penelope_engine.engine import Engine
from penelope_engine.errors import ConfigError
from penelope_engine.model.registry import load_model


def test_bad_byte_counts_are_refused() -> None:
    with pytest.raises(ConfigError, match="device_kv_bytes must be >= 0"):
        CacheConfig(device_kv_bytes=-1)
    with pytest.raises(ConfigError, match="not both"):
        CacheConfig(device_kv_bytes=1 << 20, device_memory_fraction=0.5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_pool_holds_the_pages_that_fit_in_the_bytes_at_the_kv_dtype(dtype: str) -> None:
    loaded = load_model("tiny-qwen3", dtype)
    cache = CacheConfig(page_size=16, device_pages=8, host_pages=0, device_kv_bytes=0)
    base = EngineConfig(model="tiny-qwen3", dtype=dtype, cache=cache)  # type: ignore[arg-type]
    page = kv_page_bytes(base, loaded.config)
    assert page == 16 * loaded.config.kv_bytes_per_token(4 if dtype == "float32" else 2)
    budget = 37 * page + page // 2  # 37 and a half pages' bytes
    sized = EngineConfig(
        model="tiny-qwen3",
        dtype=dtype,  # type: ignore[arg-type]
        cache=CacheConfig(page_size=16, device_pages=8, host_pages=0, device_kv_bytes=budget),
    )
    engine = Engine(sized, loaded)
    assert engine.config.cache.device_pages == 37
    assert engine.stats().pages_device_total == 37  # the pool built is that size


def test_bytes_that_hold_no_page_are_an_error() -> None:
    loaded = load_model("tiny-qwen3")
    cache = CacheConfig(page_size=16, device_pages=8, host_pages=0, device_kv_bytes=100)
    with pytest.raises(ConfigError, match="holds no page"):
        Engine(EngineConfig(model="tiny-qwen3", cache=cache), loaded)
