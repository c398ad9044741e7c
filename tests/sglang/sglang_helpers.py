"""Builders shared by the SGLang backend's tests: SGLang's own kit, Penelope's class."""

from __future__ import annotations

from array import array
from typing import Any
from unittest import mock

import torch
from sglang.srt.mem_cache.base_prefix_cache import InsertParams, InsertResult
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.test.kits.unified_radix_cache import fixtures
from sglang.test.kits.unified_radix_cache.config import CacheConfig

from penelope_engine.sglang.radix_cache import PenelopeRadixCache


def build_penelope(cfg: CacheConfig, **kwargs: Any) -> tuple[PenelopeRadixCache, Any, Any]:
    """SGLang's kit fixture (real pools on CPU tensors) with the Penelope class swapped in."""
    with mock.patch.object(fixtures, "UnifiedRadixCache", PenelopeRadixCache):
        cache, allocator, req_to_token_pool = fixtures.build_fixture(cfg, **kwargs)
    assert isinstance(cache, PenelopeRadixCache)
    return cache, allocator, req_to_token_pool


def key(tokens: list[int] | array, extra_key: str | None = None) -> RadixKey:
    return RadixKey(array("q", tokens), extra_key)


def insert(cache: PenelopeRadixCache, allocator: Any, tokens: list[int]) -> InsertResult:
    """Insert tokens with fresh slots (SGLang's insert walk frees the duplicates)."""
    slots = allocator.alloc(len(tokens))
    assert slots is not None, f"no room for {len(tokens)} tokens"
    return cache.insert(InsertParams(key=key(tokens), value=slots))


def accounting_holds(cache: PenelopeRadixCache, allocator: Any, kv_size: int) -> None:
    """SGLang's memory invariant, plus the tree's and the shelf's own checks."""
    cache.sanity_check()
    total = allocator.available_size() + cache.evictable_size() + cache.protected_size()
    assert total == kv_size, f"free+evictable+protected={total}, capacity {kv_size}"
    assert cache.total_size()[0] == cache.evictable_size() + cache.protected_size()
    slots = cache.all_values_flatten()
    assert len(torch.unique(slots)) == len(slots) == cache.total_size()[0]
