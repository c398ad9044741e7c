"""The device pool sized to the GPU: KV pages get what the weights and a step leave.

With `CacheConfig.device_memory_fraction` f > 0 (CUDA only) the engine, once its
weights are loaded, runs one warm-up forward of the largest step the scheduler
can make: `max_batch_tokens` query tokens at the end of a `max_model_len`
context, with logits for `max_running` rows. Its peak above what was allocated
before it (activations, attention's block lists or masks, logits) is the
transient a step needs. Then

    pages = (f * total - used now - step peak) // bytes per page

where "used now" is everything the device holds before the pool (this process's
weights and CUDA context, and any other process's memory: `torch.cuda.mem_get_info`).
vLLM's `gpu_memory_utilization` and SGLang's `mem_fraction_static` size their
pools the same way; 0.9 is vLLM's default. A fraction that leaves no page is a
`ConfigError` that says how much was missing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
import torch

from penelope_engine.config import EngineConfig, ModelConfig
from penelope_engine.errors import ConfigError
from penelope_engine.model.attention import build_metadata
from penelope_engine.model.backends import resolve_backend
from penelope_engine.model.registry import LoadedModel
from penelope_engine.tiers.kv_pool import DTYPES, KVPool
from penelope_engine.util import cdiv

log = logging.getLogger(__name__)
GIB = 1 << 30


@dataclass(frozen=True)
class MemoryPlan:
    """How the device's memory was shared out, in bytes."""

    total: int  # the device's memory
    fraction: float  # of `total` the engine may use
    used: int  # held before the pool: weights, CUDA context, other processes
    step_peak: int  # a warm-up step's transient peak
    page_bytes: int  # one KV page, every layer, K and V

    @property
    def pages(self) -> int:
        """KV pages that fit what is left; ConfigError when not one does."""
        left = int(self.fraction * self.total) - self.used - self.step_peak
        if left < self.page_bytes:
            raise ConfigError(
                f"device_memory_fraction {self.fraction} leaves no KV page: "
                f"{self.fraction} x {self.total / GIB:.1f} GiB, less {self.used / GIB:.2f} "
                f"GiB in use and a {self.step_peak / GIB:.2f} GiB step, is "
                f"{left / GIB:.2f} GiB; a page takes {self.page_bytes / (1 << 20):.2f} MiB "
                f"(raise the fraction, or lower max_batch_tokens or max_model_len)"
            )
        return left // self.page_bytes

    def describe(self) -> str:
        return (
            f"{self.pages} KV pages ({self.pages * self.page_bytes / GIB:.2f} GiB): "
            f"{self.fraction} of {self.total / GIB:.1f} GiB, less {self.used / GIB:.2f} GiB "
            f"in use and a {self.step_peak / GIB:.2f} GiB warm-up step"
        )


def sized_for_device(
    config: EngineConfig, loaded: LoadedModel, max_model_len: int
) -> tuple[EngineConfig, MemoryPlan | None]:
    """`config` with `device_pages` sized to the GPU when `device_memory_fraction` is set
    (and the plan that sized it), or to `device_kv_bytes` at the KV dtype when that is set;
    unchanged, with None, otherwise."""
    cc = config.cache
    if cc.device_kv_bytes:
        pages = cc.device_kv_bytes // kv_page_bytes(config, loaded.config)
        if pages < 1:
            raise ConfigError(
                f"device_kv_bytes {cc.device_kv_bytes} holds no page of "
                f"{kv_page_bytes(config, loaded.config)} bytes"
            )
        return replace(config, cache=replace(cc, device_pages=pages)), None
    if cc.device_memory_fraction == 0:
        return config, None
    device = torch.device(config.device)
    step_peak = warm_up_peak(config, loaded, max_model_len)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    page_bytes = kv_page_bytes(config, loaded.config)
    plan = MemoryPlan(total, cc.device_memory_fraction, total - free, step_peak, page_bytes)
    log.info("device pool: %s", plan.describe())
    return replace(config, cache=replace(cc, device_pages=plan.pages)), plan


def kv_bytes_per_token(config: EngineConfig, mc: ModelConfig) -> int:
    """Bytes one token's KV takes at `config`'s dtype: every layer, K and V."""
    return mc.kv_bytes_per_token(torch.finfo(DTYPES[config.dtype]).bits // 8)


def kv_page_bytes(config: EngineConfig, mc: ModelConfig) -> int:
    """Bytes one KV page takes at `config`'s dtype."""
    return config.cache.page_size * kv_bytes_per_token(config, mc)


def warm_up_peak(config: EngineConfig, loaded: LoadedModel, max_model_len: int) -> int:
    """Bytes a forward of the largest step allocates above what was allocated before it."""
    device = torch.device(config.device)
    cc, sc = config.cache, config.scheduler
    ctx = max_model_len
    rows = min(sc.max_batch_tokens, ctx)
    pool = KVPool(loaded.config, cdiv(ctx, cc.page_size), cc.page_size, DTYPES[config.dtype],
                  device)  # fmt: skip
    positions = np.arange(ctx - rows, ctx)
    meta = build_metadata(
        [positions], [np.arange(pool.num_pages)], [ctx], cc.page_size, device=device,
        backend=resolve_backend(config.attention, config.device),
    )  # fmt: skip
    logits_rows = torch.arange(rows - min(sc.max_running, rows), rows, device=device)
    meta = replace(meta, logits_indices=logits_rows)
    ids = torch.randint(0, loaded.config.vocab_size, (rows,), device=device)
    loaded.model(ids, meta, pool)  # a first call compiles (flex): its memory is not the step's
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    loaded.model(ids, meta, pool)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del pool
    return int(peak)
