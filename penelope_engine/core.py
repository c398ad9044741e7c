"""The one place that assembles the scheduling core: cache, scheduler and their tiers.

`build_core` wires a `PrefixCache` and a `Scheduler` over the given tiers from
the configs plus what the caller injects (`CoreHooks`): the clock, a wrapper
around the tiers (the simulator times every copy), the planner's cost model and
a policy object in place of the configured name. The engine (`Engine`), the
simulator (`bench.sim.replica.Replica`) and the replay all build their core
here; nothing rewires a built core. No torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from penelope_engine.cache.eviction import EvictionPolicy, make_eviction_policy
from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.placement import TierIO
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.config import CacheConfig, SchedulerConfig
from penelope_engine.sched.hinted import HintQuotas
from penelope_engine.sched.scheduler import Scheduler
from penelope_engine.sched.sequence import BatchItem, Sequence
from penelope_engine.tiers.contract import SchedulerTiers
from penelope_engine.tiers.planner import PlannerCost


class CoreTiers(TierIO, SchedulerTiers, Protocol):
    """Tiers as both the cache (demotions, spills) and the scheduler (loads) use them."""


@dataclass(frozen=True)
class CoreHooks:
    """What a caller injects into a core; the defaults are a serving engine's.

    - `clock`: the time the cache and the scheduler read (the simulator's, in a run);
    - `wrap_tiers`: wraps the engine's tiers before the core sees them (the
      simulator charges each copy to a PCIe channel on its clock);
    - `cost`: the planner's cost model (None: the engine's calibrated constants);
    - `step_observer`: called with each batch before the model runs it (the
      replay pairs batches with step times);
    - `policy`: an eviction policy object in place of `CacheConfig.policy`
      (the simulator's offline oracle).
    """

    clock: Callable[[], float] = time.monotonic
    wrap_tiers: Callable[[CoreTiers], CoreTiers] | None = None
    cost: Callable[[], PlannerCost] | None = None
    step_observer: Callable[[list[BatchItem]], None] | None = None
    policy: EvictionPolicy | None = None


@dataclass(frozen=True)
class Core:
    cache: PrefixCache
    scheduler: Scheduler
    tiers: CoreTiers


def build_core(
    cache: CacheConfig,
    scheduler: SchedulerConfig,
    tiers: CoreTiers,
    hasher: PageHasher,
    cost: Callable[[], PlannerCost],
    *,
    has_store: bool,
    max_model_len: int,
    eos_token_ids: tuple[int, ...] = (),
    page_cost: Callable[[int], float] | None = None,
    clock: Callable[[], float] = time.monotonic,
    policy: EvictionPolicy | None = None,
    turn_stop: Callable[[Sequence], str | None] | None = None,
) -> Core:
    """The cache and scheduler of one replica over `tiers`.

    `page_cost(page index)` is what cost-aware policies rank by (default: the
    planner's `cost()` at the page's position). `turn_stop(seq)` says how a
    finished request's turn ended (default: its `stop_reason_hint`).
    """
    ps = cache.page_size
    host_pages = cache.active_host_pages
    prefix = PrefixCache(
        ps,
        cache.device_pages,
        host_pages,
        policy if policy is not None else make_eviction_policy(cache.policy),
        io=tiers,
        has_store=has_store,
        time_fn=clock,
        page_cost=page_cost or (lambda p: cost().recompute_s(p * ps, ps)),
        session_ttl_s=cache.session_ttl_s,
        max_session_records=cache.max_session_records,
    )
    sched = Scheduler(
        scheduler,
        prefix,
        hasher,
        tiers,
        cost,
        eos_token_ids,
        max_model_len,
        write_through=host_pages > 0 and cache.write_policy == "write_through",
        clock=clock,
        hint_quotas=HintQuotas(cache.tenant_pin_seconds, cache.tenant_pin_tokens),
        turn_stop=turn_stop,
    )
    return Core(prefix, sched, tiers)
