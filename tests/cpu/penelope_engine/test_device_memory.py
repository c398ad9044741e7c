"""The device pool sized to the GPU: the arithmetic, and the settings it refuses.
(The warm-up measurement needs CUDA: tests/gpu/test_embedded_bf16.py runs it.)"""

from __future__ import annotations

import pytest

from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.device_memory import GIB, MemoryPlan
from penelope_engine.errors import ConfigError

MIB = 1 << 20


def test_pages_are_what_the_fraction_leaves_after_use_and_a_step() -> None:
    plan = MemoryPlan(total=80 * GIB, fraction=0.9, used=17 * GIB, step_peak=3 * GIB,
                      page_bytes=2 * MIB)  # fmt: skip
    left = int(0.9 * 80 * GIB) - 20 * GIB
    assert plan.pages == left // (2 * MIB)
    assert str(plan.pages) in plan.describe() and "0.9 of 80.0 GiB" in plan.describe()


def test_a_fraction_that_leaves_no_page_says_what_was_missing() -> None:
    plan = MemoryPlan(total=24 * GIB, fraction=0.5, used=11 * GIB, step_peak=2 * GIB,
                      page_bytes=2 * MIB)  # fmt: skip
    with pytest.raises(ConfigError, match=r"leaves no KV page: .* is -1.00 GiB"):
        _ = plan.pages


def test_the_fraction_is_checked_and_needs_cuda() -> None:
    with pytest.raises(ConfigError, match=r"device_memory_fraction must be in \[0, 1\)"):
        CacheConfig(device_memory_fraction=1.0)
    with pytest.raises(ConfigError, match="on a CPU set cache.device_pages"):
        EngineConfig(cache=CacheConfig(device_memory_fraction=0.9))
    sized = EngineConfig(device="cuda", cache=CacheConfig(device_memory_fraction=0.9))
    assert sized.cache.device_memory_fraction == 0.9
