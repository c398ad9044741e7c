"""The torch engine's parts, built from its config: KV pools, store, page identity, tiers.

`Engine.__init__` calls these in order; each takes what it needs and returns what
it builds, so the assembly reads as named steps and nothing is built twice:

    kv_pools, kv_fingerprint -> open_store (unless one is injected)
      -> page_identity (hasher, public prefixes) -> torch_tiers (+ cost calibrator)
      -> core.build_core (cache, scheduler) -> decode_graphs (CUDA)
"""

from __future__ import annotations

import re
from collections.abc import Callable

from cache_store import ArrowSegmentStore
from penelope_engine.cache.pages import PageHasher, PageNaming, PublicPrefixes
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tier import Tier
from penelope_engine.config import CacheConfig, EngineConfig, ModelConfig
from penelope_engine.model.backends import resolve_backend
from penelope_engine.model.decode_graphs import DecodeGraphs
from penelope_engine.model.decoder import Decoder
from penelope_engine.tiers.budget import ReadBudget
from penelope_engine.tiers.copies import PageSnapshot, TorchTiers
from penelope_engine.tiers.handover import SessionHandover
from penelope_engine.tiers.kv_pool import DTYPES, KVPool
from penelope_engine.tiers.planner import CalibratedCost, CostCalibrator
from penelope_engine.tiers.segment_writer import SegmentWriter
from penelope_engine.util import cdiv


def kv_pools(config: EngineConfig, mc: ModelConfig) -> tuple[KVPool, KVPool | None]:
    """The device pool and the pinned host pool (None without host pages)."""
    cc = config.cache
    dtype = DTYPES[config.dtype]
    pad = 1 if uses_decode_graphs(config) else 0  # the padding rows' page (`decode_graphs`)
    device_pool = KVPool(mc, cc.device_pages + pad, cc.page_size, dtype, config.device)
    host_pool = (
        KVPool(mc, cc.host_pages, cc.page_size, dtype, "cpu", pin_memory=True)
        if cc.active_host_pages
        else None
    )
    return device_pool, host_pool


def kv_fingerprint(config: EngineConfig, model_name: str) -> str:
    """What names this KV in the store: namespace, model, dtype and (when not float) the
    weight format, whose products write other KV, as a file-safe name."""
    cc = config.cache
    weights = "" if config.weights == "float" else f"-{config.weights}"
    name = f"{cc.namespace}-{model_name}-{config.dtype}{weights}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def open_store(cc: CacheConfig, fingerprint: str) -> ArrowSegmentStore | None:
    """The configured Arrow store, or None without a location."""
    where, ttl = cc.store_location(), cc.store_record_ttl_s
    return (
        ArrowSegmentStore(
            where, cc.store_bytes, fingerprint, record_ttl_s=ttl, tuning=cc.store_tuning()
        )
        if where
        else None
    )


def page_identity(
    cc: CacheConfig, fingerprint: str
) -> tuple[PageNaming, PageHasher, PublicPrefixes]:
    """Page identity: the naming, its hasher and the declared public prefixes."""
    naming = PageNaming(cc.page_size, fingerprint, cc.public_prefixes)
    hasher = naming.hasher()
    return naming, hasher, PublicPrefixes(hasher, cc.public_prefixes)


def torch_tiers(
    config: EngineConfig,
    mc: ModelConfig,
    device_pool: KVPool,
    host_pool: KVPool | None,
    store: ArrowSegmentStore | None,
    public: PublicPrefixes,
    spill_behind: Callable[[list[PageSnapshot]], bool] | None = None,
    on_copy: Callable[[Tier, int, float], None] | None = None,
) -> tuple[CostCalibrator, TorchTiers]:
    """The torch tiers, feeding each copy's time to the cost calibrator they come with
    (and then to `on_copy`); host evictions go to `spill_behind` (None: in line)."""
    cc = config.cache
    itemsize = DTYPES[config.dtype].itemsize
    calibrator = CostCalibrator(CalibratedCost(kv_bytes_per_token=mc.kv_bytes_per_token(itemsize)))
    tiers = TorchTiers(
        device_pool,
        host_pool,
        store,
        on_copy=calibrator.observe_copy if on_copy is None else _both(calibrator, on_copy),
        public_hashes=public.hashes,
        read_budget=ReadBudget(cc.store_read_budget_s) if store is not None else None,
        spill_behind=spill_behind,
    )
    return calibrator, tiers


def _both(
    calibrator: CostCalibrator, on_copy: Callable[[Tier, int, float], None]
) -> Callable[[Tier, int, float], None]:
    def observe(tier: Tier, nbytes: int, seconds: float) -> None:
        calibrator.observe_copy(tier, nbytes, seconds)
        on_copy(tier, nbytes, seconds)

    return observe


def segment_writer(config: EngineConfig, store: ArrowSegmentStore | None) -> SegmentWriter | None:
    """The store's write-behind queue, when there is a store and a byte bound for it."""
    bound = config.cache.write_behind_bytes
    return SegmentWriter(store, bound) if store is not None and bound > 0 else None


# What a session record read past its budget costs (`ReadBudget`'s log line).
RECORD_MISS = "the session's history in the store is not used: this turn computes it"


def session_handover(
    cc: CacheConfig,
    store: ArrowSegmentStore | None,
    tiers: TorchTiers,
    cache: PrefixCache,
    sessions: Sessions,
    writes: SegmentWriter | None,
) -> SessionHandover | None:
    """Sessions' pages and records to and from the shared store (None without a store);
    record reads have their own budget and no cool-down (one per arriving session)."""
    if store is None:
        return None
    budget = ReadBudget(cc.store_record_budget_s, cool_down=False, miss=RECORD_MISS)
    return SessionHandover(store, tiers, cache, sessions, writes, budget)


def served_window(config: EngineConfig, mc: ModelConfig) -> int:
    """The window served: a request whose prompt and output cannot all fit in the device
    pool could never run, so it is refused (400) at the window, not told to retry (503)."""
    return min(mc.max_position, config.cache.device_pages * config.cache.page_size)


def uses_decode_graphs(config: EngineConfig) -> bool:
    """Decode steps run as CUDA graphs: on CUDA, with the flex backend, unless turned off."""
    flex = resolve_backend(config.attention, config.device) == "flex"
    return config.decode_graphs and flex and config.device.startswith("cuda")


def decode_graphs(
    config: EngineConfig, model: object, pool: KVPool, max_model_len: int
) -> DecodeGraphs | None:
    """Decode steps as CUDA graphs (`decode_graphs`) where `uses_decode_graphs`, for our
    `Decoder` (its pool holds the padding page); None otherwise (eager steps)."""
    if not uses_decode_graphs(config) or not isinstance(model, Decoder):
        return None
    max_pages = cdiv(max_model_len, pool.page_size)
    return DecodeGraphs(model, pool, config.scheduler.max_running, max_pages, capture=True)
