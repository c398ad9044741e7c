"""Penelope inside SGLang 0.5.23, as a plugin rather than a fork.

A package of its own above `penelope_engine`: it imports the engine's cache pages,
hints, protocol and errors, and nothing in `penelope_engine` imports it (the
deployment layer, `deployments.ray`, picks it for `engine: sglang`).

Modules that need SGLang import it themselves; importing this package,
`config`, `shelf`, `policy`, `results` or `contract` does not.

SGLang users select the cache with `--radix-cache-backend penelope`; the
plugin registers it when SGLang loads its plugins (package entry point
`sglang.srt.plugins`: `penelope = penelope_sglang.plugin:register`).

Modules:
    accounting   the suffix shelf in SGLang's memory accounting (a layer under radix_cache)
    between_turns  the session endpoint's hints applied to the session records in SGLang's
                 scheduler (pins, victim order, fair share)
    config       `SGLangEngineConfig`: the adapter's settings, parsed anywhere (no SGLang)
    contract     what eviction and views ask of the penelope cache (a Protocol; no SGLang)
    digests      the adapter's side of the backend's view: router digests, usage -> ledger
    engine       `SGLangEngine`, the `EngineProtocol` adapter over `sglang.Engine`
    eviction     Penelope's eviction over SGLang's tree, with or without HiCache's host tier
    host_tier    HiCache's host tier as Penelope uses it: shelved pages device <-> host
    hint_rpc     the adapter's channel to that scheduler hook (SGLang's RPC socket) and its
                 wire form
    hooks        the scheduler hooks (SGLang's `HookRegistry`) that run refills
    plugin       the `sglang.srt.plugins` entry point and the radix-cache factory
    policy       Penelope's victim order over SGLang tree nodes (no SGLang)
    radix_cache  `PenelopeRadixCache`, a `UnifiedRadixCache` subclass: holes, hole-aware
                 matching, suffix reconnection, the eviction entry
    refill       the refill coordinator: one prefill-only request per hole
    sessions     the backend's per-session view: what each session left, its hints, pins
    results      `PenelopeMatch` (prefix, holes, suffix; from a shelf hit) and counters
                 (no SGLang)
    shelf        the suffix shelf: shelved private suffixes behind a hole (no SGLang)
    support      What the penelope backend supports of SGLang's cache options, and a tree-
                 path helper
    views        what the cache tells the router and the adapter: read-only tree walks
"""

from __future__ import annotations

import importlib.util

SGLANG_VERSION = "0.5.23"


def require_sglang(feature: str) -> None:
    """Fail with the fix when SGLang is not importable."""
    if importlib.util.find_spec("sglang") is None:
        raise ImportError(
            f"{feature} needs SGLang {SGLANG_VERSION}, which is not installed in this "
            f"environment. Install it with `pip install sglang=={SGLANG_VERSION}` on a CUDA "
            "machine (scripts/sglang_env.sh builds a CPU test environment, .venv-sglang)."
        )
