"""The SGLang plugin: registers the `penelope` radix-cache backend and the refill hooks.

SGLang calls `register` from `load_plugins()` in every process (server,
engine, scheduler) through the entry point our package declares:

    [project.entry-points."sglang.srt.plugins"]
    penelope = "penelope_sglang.plugin:register"

after which `--radix-cache-backend penelope` (or `radix_cache_backend="penelope"`
for `sglang.Engine`) selects `PenelopeRadixCache`.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.mem_cache.registry import (
    TreeCacheBuildContext,
    create_unified_radix_cache,
    register_radix_cache_backend,
    registered_radix_cache_backends,
)

from penelope_sglang.config import BACKEND_NAME
from penelope_sglang.hooks import register_scheduler_hooks
from penelope_sglang.radix_cache import PenelopeRadixCache


def penelope_cache_factory(ctx: TreeCacheBuildContext) -> Any:
    """Build the cache the way SGLang builds its default one (HiCache included)."""
    return create_unified_radix_cache(ctx, cache_class=PenelopeRadixCache)


def register() -> None:
    """Entry point of `sglang.srt.plugins`; safe to call more than once."""
    if BACKEND_NAME not in registered_radix_cache_backends():
        register_radix_cache_backend(BACKEND_NAME, penelope_cache_factory)
    register_scheduler_hooks()
