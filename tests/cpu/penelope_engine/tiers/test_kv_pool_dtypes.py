"""The dtype names have one home (`config.DType`); the pool's torch map follows it."""

from __future__ import annotations

import pytest

from penelope_engine.config import DTYPE_NAMES, EngineConfig
from penelope_engine.errors import ConfigError
from penelope_engine.tiers.kv_pool import DTYPES


def test_the_pool_maps_exactly_the_configured_dtypes() -> None:
    assert tuple(DTYPES) == DTYPE_NAMES


def test_an_unknown_dtype_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="float32, float16, bfloat16"):
        EngineConfig(dtype="float64")  # type: ignore[arg-type]
