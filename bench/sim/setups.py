"""Named set-ups: a router plus an engine cache, for Penelope and for the peers it is
measured against.

A peer set-up is what a user can assemble today. Routers: `pow2` (Ray Serve's
default) and the peer grid, each modelled from its source in `bench.peers`: Ray
Serve's consistent hash on the session id, Ray Serve LLM's
`PrefixCacheAffinityRouter` at its code default and at thresholds 5, 10, 20,
Ray's KV-aware router, sgl-router's `cache_aware` at its defaults and absolute
balance thresholds 4-32, sgl-router / SMG sticky sessions, Dynamo's KV router and
llm-d's default scorers. Engine caches:

* `sglang-radix`: SGLang's RadixCache, GPU only, LRU leaf eviction, FCFS.
* `sglang-hicache`: SGLang HiCache, a host tier written through, LRU, hits in
  the host loaded back layer by layer, overlapped with the forward (its load
  stream records an event per layer and the forward of layer i waits only for
  layer i: `layerwise_loads`); its write-through runs on a write stream of its
  own and stalls no step (`async_writes`), as do its writes to a storage
  backend (`async_spills`).
* `continuum`: Continuum (arXiv 2511.02230, a vLLM fork) with host offload:
  program-level FCFS and a TTL pin after each tool call, LRU. Its offload is
  vLLM's LMCacheConnectorV1 at LMCache's defaults (`use_layerwise` off), which
  loads a request's KV whole before the forward and saves it before the step
  ends: no `layerwise_loads`, no `async_writes`; LMCache's disk backend writes on
  a thread of its own (`async_spills`).

Penelope is `affinity` over its own cache, what ships (`penelope_engine.shipped`):
return-aware eviction with holes (the session expected back last goes first, its
front first), a host tier, the agent levers of `penelope_engine.sched.agent` (aged session
order, backfill, return-aware retention that yields, preempted KV parked on
the host) and a prefill chunk cap of a quarter of the step's token budget, so
a long prefill shares each step with turns that arrive behind it instead of
taking the whole step (the peers chunk at the whole budget, as SGLang's
`--chunked-prefill-size` and vLLM's `max_num_batched_tokens` do by default);
a prefill with nothing else running or queued takes the whole budget
(`solo_prefill_chunk`), as the peers' does.
Its tiers copy whole pages on the step thread before the forward
(`penelope_engine.tiers.copies`), so every load, demotion and write-through
stalls the step: no `layerwise_loads`, no `async_writes`; its host evictions'
pages are written to the store by the write-behind thread
(`TorchTiers.spill_behind`), so `async_spills` (`bench.sim.tiers`). Its copies cost
what `TorchTiers` was measured to take on an H100 (`copy_rates`,
`bench.sim.copyrates`: host loads at about the roofline's PCIe charge,
device-to-host at 20 GB/s + 3.7 ms a copy); the peers' at the roofline's.
`ablations` switches each lever off in turn.

`penelope+hints` is Penelope in hint mode (`bench.sim.hints`: its requests carry
the harness's hints from the trace); `hinted` puts any set-up over an engine with
a hint API (`HINT_CACHES`) in hint mode, and leaves the peers as they are.

`tuned_peer_setups` are the peer set-ups with the setting their own engine has
for chunking prefills at Penelope's chunk size (`TUNINGS`): SGLang's
`--chunked-prefill-size 2048`, a budget of prefill tokens per batch, all
requests together (`PrefillAdder.rem_chunk_tokens`; in a batch mixed with
decodes, as every step is here, the decode tokens are taken from it too, so it
is the step's token budget: `step_tokens`), and vLLM's
`--long-prefill-token-threshold 2048`, a cap on one request's tokens per step,
which is Penelope's own cap (`prefill_chunk`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from bench.peers.registry import SIM_ROUTERS
from penelope_engine.config import AgentConfig, SchedulerConfig
from penelope_engine.registry import Registry
from penelope_engine.shipped import PREFILL_CHUNK_SHARE, SHIPPED_AGENT, SHIPPED_POLICY

PREFETCH_LEADS_S = (5.0, 10.0, 40.0, 80.0)  # `variants`: other leads of the store read ahead
SHORTEST_STARVATION_S = 60.0  # `variants`: the shortest-first order's starvation bound
SIZE_WEIGHTS = (1.0, 4.0)  # `variants`: the queue's shortest-first weight (AgentConfig.size_weight)
STEP_TOKENS = 8192  # every set-up's step budget at its defaults (max_batch_tokens)
PENELOPE_CHUNK = STEP_TOKENS // PREFILL_CHUNK_SHARE


@dataclass(frozen=True)
class CacheSpec:
    """An engine's cache and scheduler: policy, tiers, agent levers, prefill chunk cap,
    step budget, and whether loads back to the device overlap the forward."""

    policy: str
    tiers: str  # bench.sim.replica.TIERS
    agent: AgentConfig = AgentConfig()
    prefill_chunk: int = STEP_TOKENS  # most tokens of one request's prefill in one step
    solo_prefill_chunk: int = 0  # ... when nothing else runs or waits (0: prefill_chunk)
    step_tokens: int = STEP_TOKENS  # most tokens of one step, prefill and decode
    max_prefills: int = 0  # most requests in prefill at once (0: as the step allows)
    layerwise_loads: bool = False  # loads stream layer by layer, overlapped with the forward
    async_writes: bool = False  # device-to-host copies on a stream of their own (no stall)
    async_spills: bool = False  # host pages written to the store off the step thread
    hints: bool = False  # hint mode: requests carry a harness's hints (`bench.sim.hints`)
    kv_scale: int = 1  # device and host budgets x this (`unbounded`: a ceiling, not a product)
    free_copies: bool = False  # copies between tiers take no time (`free_copies`: a what-if)
    copy_rates: str | None = None  # copies at an engine's measured rates (`bench.sim.copyrates`)

    def __post_init__(self) -> None:
        if self.kv_scale < 1:
            raise ValueError(f"kv_scale must be >= 1, got {self.kv_scale}")


CACHES: dict[str, CacheSpec] = {
    "sglang-radix": CacheSpec("lru", "gpu"),
    "sglang-hicache": CacheSpec(
        "lru", "gpu+cpu", layerwise_loads=True, async_writes=True, async_spills=True
    ),
    "continuum": CacheSpec(
        "lru", "gpu+cpu", AgentConfig(admission="program", retention="ttl"), async_spills=True
    ),
    "penelope": CacheSpec(
        SHIPPED_POLICY,
        "gpu+cpu",
        SHIPPED_AGENT,
        PENELOPE_CHUNK,
        solo_prefill_chunk=STEP_TOKENS,
        async_spills=True,
        copy_rates="torch-tiers-h100",
    ),  # fmt: skip
}
# Every router a user can put in front of these engines today: Ray's pow2 and the peer
# grid (`bench.peers`); Penelope's `affinity` is the product's own.
PEER_ROUTERS = tuple(r for r in SIM_ROUTERS if r != "affinity")
PEER_CACHES = ("sglang-radix", "sglang-hicache", "continuum")
PEER_ENGINES = {"sglang-radix": "sglang", "sglang-hicache": "sglang", "continuum": "vllm"}
HINT_CACHES = ("penelope",)  # engines that take a harness's hints (SGLang, vLLM have no API)
# Per engine, its own setting that chunks prefills at Penelope's chunk size: the name's
# suffix and what it does to the spec (see the module's docstring).
TUNINGS: dict[str, tuple[str, Callable[[CacheSpec], CacheSpec]]] = {
    "sglang": (
        f"+chunked_prefill_{PENELOPE_CHUNK}",
        lambda s: dataclasses.replace(s, step_tokens=PENELOPE_CHUNK, prefill_chunk=PENELOPE_CHUNK),
    ),
    "vllm": (
        f"+long_prefill_{PENELOPE_CHUNK}",
        lambda s: dataclasses.replace(s, prefill_chunk=PENELOPE_CHUNK),
    ),
}


def scaled_scheduler(cache: str | None, base: SchedulerConfig) -> SchedulerConfig:
    """`base` with the named cache's agent levers, and its step budget and prefill chunk
    at the same shares of `base.max_batch_tokens` as the spec's of `STEP_TOKENS` (a CPU
    replay runs a smaller step than an H200); `base` itself when no cache is named."""
    if cache is None:
        return base
    spec = Registry("cache", CACHES).get(cache)
    step = max(1, base.max_batch_tokens * spec.step_tokens // STEP_TOKENS)
    chunk = min(max(1, base.max_batch_tokens * spec.prefill_chunk // STEP_TOKENS), step)
    solo = base.max_batch_tokens * spec.solo_prefill_chunk // STEP_TOKENS
    return dataclasses.replace(
        base,
        max_batch_tokens=step,
        prefill_chunk=chunk,
        solo_prefill_chunk=min(max(solo, chunk), step) if spec.solo_prefill_chunk else 0,
        max_prefills=spec.max_prefills,
        agent=spec.agent,
    )


@dataclass(frozen=True)
class Setup:
    name: str
    system: str  # "penelope" or the peer's name
    router: str
    cache: str  # a CACHES name
    spec: CacheSpec
    tuned: bool = False  # a peer with its engine's prefill chunking tuned (`TUNINGS`)

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
            "prefetch_lead_s": a.prefetch_lead_s,
            "prefill_chunk": self.spec.prefill_chunk,
            "solo_prefill_chunk": self.spec.solo_prefill_chunk,
            "step_tokens": self.spec.step_tokens,
            "max_prefills": self.spec.max_prefills,
            "layerwise_loads": self.spec.layerwise_loads,
            "async_writes": self.spec.async_writes,
            "async_spills": self.spec.async_spills,
            "hints": self.spec.hints,
            "kv_scale": self.spec.kv_scale,
            "free_copies": self.spec.free_copies,
            "copy_rates": self.spec.copy_rates,
        }


def peer_setups() -> list[Setup]:
    return [
        Setup(f"{c}/{r}", c, r, c, CACHES[c])
        for c, r in itertools.product(PEER_CACHES, PEER_ROUTERS)
    ]


def tuned_peer_setups() -> list[Setup]:
    """The peer set-ups with their engine's own setting that chunks prefills at Penelope's
    chunk size (`TUNINGS`)."""
    out = []
    for s in peer_setups():
        suffix, tune = TUNINGS[PEER_ENGINES[s.cache]]
        out.append(Setup(f"{s.name} {suffix}", s.system, s.router, s.cache, tune(s.spec), True))
    return out


def penelope_setup() -> Setup:
    return Setup("penelope", "penelope", "affinity", "penelope", CACHES["penelope"])


def hinted(setup: Setup, on: bool = True) -> Setup:
    """`setup` in hint mode when `on` and its engine takes hints; else `setup` itself."""
    if not on or setup.cache not in HINT_CACHES:
        return setup
    return dataclasses.replace(setup, spec=dataclasses.replace(setup.spec, hints=True))


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
        "prefetch": dataclasses.replace(full, agent=dataclasses.replace(a, prefetch_lead_s=0.0)),
    }
    out = [Setup(f"penelope - {k}", "penelope", "affinity", "penelope", s) for k, s in off.items()]
    out.append(Setup("penelope - router (pow2)", "penelope", "pow2", "penelope", full))
    return out


def variants() -> list[Setup]:
    """Penelope with one lever changed rather than switched off (named, so that runs can
    compare them): another eviction policy, loads layer by layer, device-to-host copies
    on a stream of their own, copies at other rates,
    a peer's router in front of Penelope's cache, hint mode."""
    full = penelope_setup()
    out = [
        Setup(f"penelope (policy {p})", "penelope", "affinity", "penelope",
              dataclasses.replace(full.spec, policy=p))
        for p in ("penelope", "greedydual", "return_aware", "oracle")
        if p != full.spec.policy
    ]  # fmt: skip
    agent = full.spec.agent
    out += [
        Setup(f"penelope (size weight {w:g})", "penelope", "affinity", "penelope",
              dataclasses.replace(full.spec, agent=dataclasses.replace(agent, size_weight=w)))
        for w in SIZE_WEIGHTS
    ]  # fmt: skip
    out += [
        Setup(f"penelope (prefetch {s:g}s)", "penelope", "affinity", "penelope",
              dataclasses.replace(full.spec, agent=dataclasses.replace(agent, prefetch_lead_s=s)))
        for s in PREFETCH_LEADS_S
        if s != agent.prefetch_lead_s
    ]  # fmt: skip
    out += [  # the queue shortest-first, and one prefill at a time (the CPU's schedule)
        Setup(f"penelope ({label})", "penelope", "affinity", "penelope",
              dataclasses.replace(full.spec, max_prefills=mp, agent=dataclasses.replace(
                  agent, admission="shortest", starvation_s=SHORTEST_STARVATION_S)))
        for label, mp in (("shortest first", 0), ("shortest first + one prefill", 1))
    ]  # fmt: skip
    lw = dataclasses.replace(full.spec, layerwise_loads=True)
    out.append(Setup("penelope (layerwise loads)", "penelope", "affinity", "penelope", lw))
    aw = dataclasses.replace(full.spec, async_writes=True)  # write-through off the step
    out.append(Setup("penelope (async writes)", "penelope", "affinity", "penelope", aw))
    out += [  # its copies at other rates: the roofline's, or the engine's cold in-step load
        Setup(f"penelope (copies {label})", "penelope", "affinity", "penelope",
              dataclasses.replace(full.spec, copy_rates=rates))
        for label, rates in (("roofline", None), ("cold", "torch-tiers-h100-cold"))
    ]  # fmt: skip
    out += [cross_setup(full, r) for r in PEER_ROUTERS]
    out.append(dataclasses.replace(hinted(full), name="penelope+hints"))
    out += [unbounded(s) for s in [full, *tuned_peer_setups()]]
    out += [free_copies(s) for s in [full, *tuned_peer_setups()]]
    return out


UNBOUNDED_KV_SCALE = 64  # x the H200's KV budget: every session of a capacity run fits


def unbounded(setup: Setup) -> Setup:
    """`setup` with KV memory that never runs out (`UNBOUNDED_KV_SCALE` x its budgets), the
    same compute, router and scheduler: what no eviction policy, tier or prefetch can beat,
    since every page a session ever computed stays on the device."""
    spec = dataclasses.replace(setup.spec, kv_scale=UNBOUNDED_KV_SCALE)
    return dataclasses.replace(setup, name=f"{setup.name} (unbounded KV)", spec=spec)


def free_copies(setup: Setup) -> Setup:
    """`setup` with copies between its tiers that take no time (`bench.sim.costmodel.FreeCopies`),
    the same memory, compute, router and scheduler: what no prefetch, into the host or the
    device, nor any overlap of loads with the forward can beat."""
    spec = dataclasses.replace(setup.spec, free_copies=True)
    return dataclasses.replace(setup, name=f"{setup.name} (free copies)", spec=spec)


def cross_setup(cache: Setup, router: str) -> Setup:
    """`cache`'s engine behind `router` (the attribution's cross rows)."""
    name = (
        f"penelope cache / {router}" if cache.system == "penelope" else f"{cache.cache} / {router}"
    )
    return Setup(name, cache.system, router, cache.cache, cache.spec, cache.tuned)


def setups(
    names: list[str] | None = None, with_ablations: bool = True, tuned: bool = False
) -> list[Setup]:
    """Every peer set-up (and the tuned ones), Penelope and its ablations, or those named."""
    peers = peer_setups() + (tuned_peer_setups() if tuned else [])
    every = peers + [penelope_setup()] + (ablations() if with_ablations else [])
    if not names:
        return every
    known = peer_setups() + tuned_peer_setups() + [penelope_setup()] + ablations() + variants()
    registry = Registry("set-up", {s.name: s for s in known})
    return [registry.get(n) for n in names]
