"""The one place that assembles the scheduling core: sessions, cache, scheduler, tiers.

`build_core` wires a `Sessions` book, a `PrefixCache` over it and a `Scheduler`
over both and the given tiers, from the configs plus everything the caller
injects: serving's `CoreHooks` (the clock) and, from a bench or `penelope verify`
only, `BenchHooks` (a wrapper around the tiers: the simulator times every copy; a
fixed cost model; a policy object in place of the configured name; observers). Both
costs the core reads, the planner's and the page cost the cost-aware policies rank by,
come from one model (`core_costs`): the hooked one, or the engine's calibrated one.
It also wires every listener of dropped session records (the prefetcher's and
the caller's). The engine (`Engine`), the simulator (`bench.sim.replica.Replica`)
and the replay all build their core here; nothing rewires a built core. The
bench hooks' observers are the engine's to call (`Core.bench`). No torch.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from penelope_engine.cache.eviction import EvictionPolicy, make_eviction_policy
from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.placement import TierIO
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tier import Tier
from penelope_engine.config import CacheConfig, SchedulerConfig
from penelope_engine.sched.hinted import HintQuotas
from penelope_engine.sched.scheduler import Scheduler
from penelope_engine.sched.sequence import BatchItem
from penelope_engine.sched.sequence import Sequence as Request
from penelope_engine.tiers.contract import SchedulerTiers
from penelope_engine.tiers.planner import CalibratedCost, PlannerCost

if TYPE_CHECKING:
    import torch


class CoreTiers(TierIO, SchedulerTiers, Protocol):
    """Tiers as both the cache (demotions, spills) and the scheduler (loads) use them."""


@dataclass(frozen=True)
class CoreHooks:
    """What serving injects into a core: the clock the cache and the scheduler read
    (`time.monotonic`; a test gives its own). Everything else a caller may inject only
    a bench or `penelope verify` does, as `BenchHooks`."""

    clock: Callable[[], float] = time.monotonic


@dataclass(frozen=True)
class BenchHooks:
    """What a bench (the simulator, the replay) or `penelope verify` injects to steer or
    observe a core; serving passes none, and the defaults change nothing.

    - `wrap_tiers`: wraps the engine's tiers before the core sees them (the
      simulator charges each copy to a PCIe channel on its clock);
    - `cost`: a fixed cost model for the planner and the policies' page cost (None:
      the engine's calibrated one, refined as it runs);
    - `policy`: an eviction policy object in place of `CacheConfig.policy`
      (the simulator's offline oracle);
    - `spills_behind`: the engine's host evictions go to the store on the write-behind
      queue (False: in line, as a simulated clock charges them);
    - `step_observer`: called with each batch before the model runs it (the
      replay pairs batches with step times);
    - `on_copy`: told (tier, bytes, seconds) of each load the engine's tiers make,
      after the engine's cost calibrator (a bench timing loads);
    - `on_logits`: told (batch, logits, sampled tokens) after each forward of the
      engine's model runner (`penelope verify` compares the rows with a reference).
    """

    wrap_tiers: Callable[[CoreTiers], CoreTiers] | None = None
    cost: PlannerCost | None = None
    policy: EvictionPolicy | None = None
    spills_behind: bool = True
    step_observer: Callable[[list[BatchItem]], None] | None = None
    on_copy: Callable[[Tier, int, float], None] | None = None
    on_logits: Callable[[list[BatchItem], torch.Tensor, list[int | None]], None] | None = None


@dataclass(frozen=True)
class Core:
    cache: PrefixCache
    sessions: Sessions
    scheduler: Scheduler
    tiers: CoreTiers
    hasher: PageHasher  # the core's page ids (the simulator names a fleet's pages with it)
    hooks: CoreHooks
    bench: BenchHooks


def build_core(
    cache: CacheConfig,
    scheduler: SchedulerConfig,
    tiers: CoreTiers,
    hasher: PageHasher,
    hooks: CoreHooks = CoreHooks(),
    bench: BenchHooks = BenchHooks(),
    *,
    calibrated: Callable[[], PlannerCost] = CalibratedCost,
    has_store: bool,
    max_model_len: int,
    eos_token_ids: tuple[int, ...] = (),
    on_forget: Sequence[Callable[[list[str]], None]] = (),
    turn_stop: Callable[[Request], str | None] | None = None,
) -> Core:
    """The sessions book, cache and scheduler of one replica over `tiers` (wrapped by
    `bench.wrap_tiers`).

    `calibrated()` is the engine's current cost model, used when `bench.cost` is None;
    `on_forget` are called with the session ids whose records were dropped;
    `turn_stop(request)` says how a finished request's turn ended (default: its
    `stop_reason_hint`; the engine also reads the reply, `Engine.turn_stop`).
    """
    ps = cache.page_size
    host_pages = cache.active_host_pages
    core_tiers = bench.wrap_tiers(tiers) if bench.wrap_tiers is not None else tiers
    cost, page_cost = core_costs(bench.cost, calibrated, ps)
    sessions = Sessions(hooks.clock, cache.session_ttl_s, cache.max_session_records)
    prefix = PrefixCache(
        ps,
        cache.device_pages,
        host_pages,
        bench.policy if bench.policy is not None else make_eviction_policy(cache.policy),
        io=core_tiers,
        has_store=has_store,
        sessions=sessions,
        page_cost=page_cost,
    )
    sched = Scheduler(
        scheduler,
        prefix,
        sessions,
        hasher,
        core_tiers,
        cost,
        eos_token_ids,
        max_model_len,
        write_through=host_pages > 0 and cache.write_policy == "write_through",
        clock=hooks.clock,
        hint_quotas=HintQuotas(cache.tenant_pin_seconds, cache.tenant_pin_tokens),
        turn_stop=turn_stop,
        on_forget=on_forget,
    )
    return Core(prefix, sessions, sched, core_tiers, hasher, hooks, bench)


def core_costs(
    fixed: PlannerCost | None, calibrated: Callable[[], PlannerCost], page_size: int
) -> tuple[Callable[[], PlannerCost], Callable[[int], float]]:
    """The planner's cost model and the page cost (seconds to recompute the page at a page
    index) from one model: `fixed` (a page's cost then never changes: cached), or the
    calibrated one as it stands when asked."""
    ps = page_size
    if fixed is not None:
        model = fixed
        return (lambda: model), functools.cache(lambda p: model.recompute_s(p * ps, ps))
    return calibrated, lambda p: calibrated().recompute_s(p * ps, ps)
