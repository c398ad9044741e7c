"""What the penelope backend supports of SGLang's cache options, and a tree-path helper.

Full-attention models only: no SWA/Mamba components, no EAGLE bigram keys, no
session radix cache. Holes need the tree's nodes, which SGLang's pure-Python
tree core exposes, so the backend always runs on it.
"""

from __future__ import annotations

from array import array
from dataclasses import replace
from typing import Any

from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

from penelope_sglang.results import key_tokens

FULL = ComponentType.FULL


def supported_params(params: CacheInitParams) -> CacheInitParams:
    """`params` for the Python tree core, or a clear error for what the backend cannot do."""
    unsupported = set(params.tree_components or ()) - {FULL}
    if unsupported:
        raise ValueError(
            "the penelope radix cache supports full-attention models only; this model "
            f"needs components {sorted(str(c) for c in unsupported)}. Drop "
            "--radix-cache-backend penelope for it."
        )
    if params.is_eagle:
        raise ValueError("the penelope radix cache does not support EAGLE (bigram) keys")
    if params.enable_session_radix_cache:
        raise ValueError("the penelope radix cache does not support --enable-session-radix-cache")
    # Holes need the tree's nodes: the pure-Python TreeCore exposes them.
    return replace(params, tree_core_backend="python")


def path_above(node: Any) -> array:
    """Token ids on the root path above `node` (an SGLang radix tree node)."""
    parts: list[array] = []
    cur = node.parent
    while cur.parent is not None:
        parts.append(key_tokens(cur.key))
        cur = cur.parent
    path = array("q")
    for part in reversed(parts):
        path.extend(part)
    return path
