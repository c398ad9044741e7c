"""Builders shared by the SGLang backend's tests: SGLang's own kit, Penelope's class."""

from __future__ import annotations

import contextlib
from array import array
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch
from sglang.srt.mem_cache.base_prefix_cache import InsertParams, InsertResult
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.test.kits.unified_radix_cache import fixtures
from sglang.test.kits.unified_radix_cache.config import CacheConfig

from penelope_sglang.radix_cache import PenelopeRadixCache


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


# ---- HiCache on CPU: SGLang's real host pool and controller, two named stand-ins ----------


def transfer_kv_direct_standin(
    src_layers: list[torch.Tensor],
    dst_layers: list[torch.Tensor],
    src_indices: torch.Tensor,
    dst_indices: torch.Tensor,
    page_size: int,
) -> None:
    """Stand-in for sgl_kernel's `transfer_kv_direct` (a CUDA kernel, absent on CPU):
    the same per-layer token copy, as a torch index copy."""
    for src, dst in zip(src_layers, dst_layers, strict=True):
        dst[dst_indices.to(dst.device)] = src[src_indices.to(src.device)].to(dst.device)


@contextlib.contextmanager
def cpu_hicache_standins() -> Iterator[None]:
    """The two CUDA-only pieces of SGLang's host tier, replaced for a CPU run (nothing else):

    - pinned registration (`cudaHostRegister`, `pool_host.common._cuda_host_register`):
      a no-op, so the host pool is plain CPU memory;
    - the `direct` I/O backend's copy kernel (sgl_kernel's `transfer_kv_direct`):
      `transfer_kv_direct_standin`, a torch index copy.
    And one check that reads the machine rather than the pool: the host pool's
    free-memory budget (`pool_host.base.host_memory_budget_bytes`, the machine's
    available memory less a fixed reserve) grants what is asked (a few KiB here);
    on a shared test machine the reserve alone can exceed what is free.
    """
    from sglang.srt.mem_cache.pool_host import base, common, mha

    with (
        mock.patch.object(base, "host_memory_budget_bytes", lambda requested, *a, **k: requested),
        mock.patch.object(common, "_cuda_host_register", lambda *a, **k: None),
        mock.patch.object(mha, "transfer_kv_direct", transfer_kv_direct_standin, create=True),
    ):
        yield


def build_penelope_hicache(
    cfg: CacheConfig, host_tokens: int, write_policy: str = "write_through", **kwargs: Any
) -> tuple[PenelopeRadixCache, Any, Any]:
    """`build_penelope` plus SGLang's own `init_hicache` (host pool, HiCacheController),
    the `direct` I/O backend, layer-first host layout. Call it (and use the cache)
    inside `cpu_hicache_standins()`. The host pool holds about `host_tokens` tokens.
    """
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    cache, allocator, req_to_token_pool = build_penelope(cfg, **kwargs)
    server_args = ServerArgs(
        model_path="dummy",
        page_size=cfg.page_size,
        hicache_io_backend="direct",
        hicache_mem_layout="layer_first",
        hicache_write_policy=write_policy,
        hicache_ratio=host_tokens / cfg.kv_size,
    )
    set_global_server_args_for_scheduler(server_args)
    cache.init_hicache(server_args, cache.cache_init_params)
    fixtures.drop_hicache_atexit_pin(cache)
    cache.write_through_threshold = 1 << 30  # no backups on insert: eviction decides
    cache.load_back_threshold = 0
    return cache, allocator, req_to_token_pool


def host_accounting_holds(cache: PenelopeRadixCache) -> None:
    """Host slots: free + shelved host spans + SGLang's host-only nodes == the pool."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    tier = cache.host_tier
    assert tier is not None
    in_tree = sum(
        len(node.component_data[0].host_value)
        for node in cache.tree_core._node_arena.values()
        if node.component_data[0].host_value is not None
    )
    size = tier.kv_host.size
    total = tier.available() + cache.shelf.host_tokens() + in_tree
    assert total == size, f"host: free+shelf+tree={total}, pool {size} ({PoolName.KV})"
