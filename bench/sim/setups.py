"""Named set-ups: a router plus an engine cache, for Penelope and for the peers it is
measured against.

A peer set-up is what a user can assemble today. Routers (`router.policies`):
`pow2` (Ray Serve's default), `ray_prefix` (Ray Serve LLM's
`PrefixCacheAffinityRouter`, `bench.peers.ray_prefix`) and `sgl_cache_aware`
(sgl-router's `cache_aware`, `bench.peers.sgl_cache_aware`). Engine caches:

* `sglang-radix`: SGLang's RadixCache, GPU only, LRU leaf eviction, FCFS.
* `sglang-hicache`: SGLang HiCache, a host tier written through, LRU, hits in
  the host loaded back.
* `continuum`: Continuum (arXiv 2511.02230, a vLLM fork) with host offload:
  program-level FCFS and a TTL pin after each tool call, LRU.

Penelope is `affinity` over its own cache: GreedyDual eviction with holes, a
host tier, the agent levers of `penelope_engine.sched.agent` (aged session
order, backfill, return-aware retention that yields, preempted KV parked on
the host) and a prefill chunk cap of a quarter of the step's token budget, so
a long prefill shares each step with turns that arrive behind it instead of
taking the whole step (the peers chunk at the whole budget, as SGLang's
`--chunked-prefill-size` and vLLM's `max_num_batched_tokens` do by default).
`ablations` switches each off in turn. `tuned_peer_setups` are the peer
set-ups with Penelope's chunk cap (what a user who sets vLLM's
`long_prefill_token_threshold` or a smaller SGLang chunk would run).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from penelope_engine.config import AgentConfig
from penelope_engine.registry import Registry

STEP_TOKENS = 8192  # every set-up's step budget (max_batch_tokens)
PENELOPE_CHUNK = STEP_TOKENS // 4


@dataclass(frozen=True)
class CacheSpec:
    """An engine's cache and scheduler: policy, tiers, agent levers, prefill chunk cap."""

    policy: str
    tiers: str  # bench.sim.replica.TIERS
    agent: AgentConfig = AgentConfig()
    prefill_chunk: int = STEP_TOKENS  # most tokens of one request's prefill in one step


CACHES: dict[str, CacheSpec] = {
    "sglang-radix": CacheSpec("lru", "gpu"),
    "sglang-hicache": CacheSpec("lru", "gpu+cpu"),
    "continuum": CacheSpec("lru", "gpu+cpu", AgentConfig(admission="program", retention="ttl")),
    "penelope": CacheSpec(
        "greedydual",
        "gpu+cpu",
        AgentConfig(
            admission="aged", backfill=True, retention="return_aware", park_on_preempt=True
        ),
        PENELOPE_CHUNK,
    ),
}
PEER_ROUTERS = ("pow2", "ray_prefix", "sgl_cache_aware")
PEER_CACHES = ("sglang-radix", "sglang-hicache", "continuum")


@dataclass(frozen=True)
class Setup:
    name: str
    system: str  # "penelope" or the peer's name
    router: str
    cache: str  # a CACHES name
    spec: CacheSpec
    tuned: bool = False  # a peer given Penelope's chunk cap (not the peer's default)

    @property
    def levers(self) -> dict[str, object]:
        a = self.spec.agent
        return {
            "policy": self.spec.policy,
            "tiers": self.spec.tiers,
            "admission": a.admission,
            "backfill": a.backfill,
            "retention": a.retention,
            "park_on_preempt": a.park_on_preempt,
            "size_weight": a.size_weight,
            "prefill_chunk": self.spec.prefill_chunk,
        }


def peer_setups() -> list[Setup]:
    return [
        Setup(f"{c}/{r}", c, r, c, CACHES[c])
        for c, r in itertools.product(PEER_CACHES, PEER_ROUTERS)
    ]


def tuned_peer_setups() -> list[Setup]:
    """The peer set-ups with Penelope's prefill chunk cap."""
    return [
        Setup(
            f"{s.name} +chunk{PENELOPE_CHUNK}",
            s.system,
            s.router,
            s.cache,
            dataclasses.replace(s.spec, prefill_chunk=PENELOPE_CHUNK),
            tuned=True,
        )
        for s in peer_setups()
    ]


def penelope_setup() -> Setup:
    return Setup("penelope", "penelope", "affinity", "penelope", CACHES["penelope"])


def ablations() -> list[Setup]:
    """Penelope with one lever switched off, each in turn."""
    full = CACHES["penelope"]
    a = full.agent
    off = {
        "aged order": dataclasses.replace(full, agent=dataclasses.replace(a, admission="fcfs")),
        "backfill": dataclasses.replace(full, agent=dataclasses.replace(a, backfill=False)),
        "retention": dataclasses.replace(full, agent=dataclasses.replace(a, retention="none")),
        "park on preempt": dataclasses.replace(
            full, agent=dataclasses.replace(a, park_on_preempt=False)
        ),
        "policy (lru)": dataclasses.replace(full, policy="lru"),
        "host tier": dataclasses.replace(full, tiers="gpu"),
        "chunk cap": dataclasses.replace(full, prefill_chunk=STEP_TOKENS),
    }
    out = [Setup(f"penelope - {k}", "penelope", "affinity", "penelope", s) for k, s in off.items()]
    out.append(Setup("penelope - router (pow2)", "penelope", "pow2", "penelope", full))
    return out


def setups(
    names: list[str] | None = None, with_ablations: bool = True, tuned: bool = False
) -> list[Setup]:
    """Every peer set-up (and the tuned ones), Penelope and its ablations, or those named."""
    peers = peer_setups() + (tuned_peer_setups() if tuned else [])
    every = peers + [penelope_setup()] + (ablations() if with_ablations else [])
    if not names:
        return every
    known = peer_setups() + tuned_peer_setups() + [penelope_setup()] + ablations()
    registry = Registry("set-up", {s.name: s for s in known})
    return [registry.get(n) for n in names]
