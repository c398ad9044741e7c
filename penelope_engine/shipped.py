"""What Penelope ships: the eviction policy, agent levers and prefill chunk that its
benchmarks measure (`bench.sim.setups`' `penelope`, `bench replay --caches penelope`)
and its entry points run (`serve_config.yaml`, `penelope serve`).

One definition, so that the product deployed is the product measured
(`tests/cpu/penelope_engine/test_shipped.py` holds serve_config.yaml to it). The
configs' own defaults (`CacheConfig`, `AgentConfig`) stay neutral: levers off, as
SGLang and vLLM schedule, for tests and for anyone composing an engine by hand.
"""

from __future__ import annotations

from penelope_engine.config import AgentConfig, EvictionPolicyName, SchedulerConfig

# Where KV memory binds (docs/results.md 12.3, 14) `return_aware` keeps the sessions
# that come back soonest; where it does not (host factor 2) it ties `greedydual`.
SHIPPED_POLICY: EvictionPolicyName = "return_aware"
# Prefetch reads a hinted session's store pages into the host 20 s before its return
# (docs/results.md 15: the best lead at 128 sessions with a store).
SHIPPED_AGENT = AgentConfig(
    admission="aged",
    backfill=True,
    retention="return_aware",
    park_on_preempt=True,
    prefetch_lead_s=20.0,
)
# A request's prefill takes at most a quarter of a step's tokens, so a long prefill
# shares each step with the turns that arrive behind it.
PREFILL_CHUNK_SHARE = 4


def shipped_scheduler(max_batch_tokens: int = 2048, max_running: int = 64) -> SchedulerConfig:
    """The scheduler Penelope ships for a step of `max_batch_tokens`."""
    return SchedulerConfig(
        max_batch_tokens=max_batch_tokens,
        max_running=max_running,
        prefill_chunk=max(1, max_batch_tokens // PREFILL_CHUNK_SHARE),
        agent=SHIPPED_AGENT,
    )
