"""Agent-aware scheduling: the order of the queue and KV retention during tool calls.

Two strategies the `Scheduler` consults, both torch-free and on the
scheduler's clock, so the engine and the simulator run the same levers:

* **Queue order** (`queue_key`): a waiting request's key, lowest first.
  `fcfs` is its arrival (SGLang, vLLM). `program` is its session's first
  arrival (Continuum's program-level FCFS: a returning turn goes ahead of
  sessions that started later). `aged` is the session's first arrival, but
  never more than `age_cap_s` before the request's own arrival: a returning
  turn passes requests that arrived at most that much earlier, so a new
  session waits at most `age_cap_s` behind returning ones. `shortest` is the
  request's estimated prefill seconds (`prefill_estimate_s`: what its cache
  match leaves to compute), shortest first: on a server whose step time grows
  with its tokens (a CPU), one prefill at a time in this order minimises the
  mean wait (SRPT), and the turns that compute least are the returning ones
  whose KV is still cached. Whatever the order, a request that has waited
  `starvation_s` is passed by nobody (`Intake`). With
  `size_weight` w > 0, any of them adds w x the request's estimated prefill
  seconds (`prefill_estimate_s`): shortest-first within a bounded window,
  which lowers the mean wait when small tool-result turns queue behind long
  prefills.

* **Retention** (`Retention`): when a turn ends, how long to pin the
  session's path on the device. A pin is a lock on the session's leaf, so
  the policy cannot evict it; it ends when the session's next turn arrives
  or the TTL expires. The TTL maximises the utility of pinning over the
  observed tool times T (cf. Continuum, arXiv 2511.02230, section 4):

      U(tau) = P(T <= tau) * B  -  price * s * E[min(T, tau)]

  with B the seconds saved when the turn returns to a pinned cache (its
  reload, by the planner's own cost, plus the recent queue wait a
  re-admission pays), s the share of the device the pin holds and `price`
  the value of a device-second of memory in device-seconds of compute.
  Both pin only after a `tool_use` stop (after `end_turn` a human answers:
  minutes). `ttl` (Continuum) fits the fleet's tool times and holds the pin
  until it expires. `return_aware` fits the session's own tool times once it
  has a few, and yields: when the head of
  the queue does not fit, the pin whose session is expected back last is
  released first (its pages become evictable, and with a host tier they are
  already written through).

A harness's hints (`penelope_engine.hints`, applied by `sched.hinted`) reach
retention here: `expected_gap_s` stands in for the learned tool times (one
sample, held `GAP_SLACK` times longer, whatever the stop reason), and
`retain_s` sets a pin of its own (`pin`, `hinted`), which yields to a queued
request in every mode, so a hint never blocks admission.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from penelope_engine.cache.prefix_cache import LockHandle, PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tier import Tier
from penelope_engine.config import AgentConfig
from penelope_engine.sched.sequence import Sequence
from penelope_engine.tiers.planner import PlannerCost, choose

FLEET_SAMPLES = 4096  # tool gaps kept for the fleet's distribution
OWN_SAMPLES = 3  # a session's own gaps needed before they replace the fleet's
OWN_KEPT = 256  # a session's most recent gaps kept (a session that runs for weeks)
GAP_SLACK = 1.5  # a pin from a harness's expected gap lasts this many times the gap


def queue_key(cfg: AgentConfig, arrival: float, session_start: float, estimate_s: float) -> float:
    """The queue-order key of a request (lowest is admitted first); `estimate_s` is its
    `prefill_estimate_s` (read with "shortest" or a `size_weight` only)."""
    if cfg.admission == "shortest":
        return estimate_s
    if cfg.admission == "program":
        key = session_start
    elif cfg.admission == "aged":
        key = max(session_start, arrival - cfg.age_cap_s)
    else:  # "fcfs" (`AgentConfig` admits no other value)
        key = arrival
    return key + cfg.size_weight * estimate_s


def prefill_estimate_s(seq: Sequence, cache: PrefixCache, cost: PlannerCost) -> float:
    """Seconds of prefill `seq` would need if admitted now, by the planner's cost: its
    holes and the tokens past its cache match, at their positions (loads left out: an
    estimate for ordering only)."""
    ps = cache.page_size
    match = cache.match(seq.hashes[: (len(seq.tokens) - 1) // ps])
    holes = np.flatnonzero(match.where == Tier.HOLE)
    runs = np.split(holes, np.flatnonzero(np.diff(holes) > 1) + 1) if len(holes) else []
    tail = match.num_pages * ps
    return sum(cost.recompute_s(int(r[0]) * ps, len(r) * ps) for r in runs) + cost.recompute_s(
        tail, len(seq.tokens) - tail
    )


def best_ttl(samples: np.ndarray, benefit_s: float, share: float, price: float) -> float:
    """The tau among 0 and the samples that maximises U(tau); 0 when no pin pays."""
    if not len(samples) or benefit_s <= 0:
        return 0.0
    t = np.sort(samples)
    n = len(t)
    p_back = np.arange(1, n + 1) / n  # P(T <= t[i])
    # E[min(T, t[i])] = (sum of t[:i+1] + t[i] * (n - i - 1)) / n
    held = (np.cumsum(t) + t * (n - 1 - np.arange(n))) / n
    utility = p_back * benefit_s - price * share * held
    i = int(np.argmax(utility))
    return float(t[i]) if utility[i] > 0 else 0.0


@dataclass
class Pin:
    lock: LockHandle
    pages: int
    expires: float
    tenant: str = ""  # set on hinted pins (the tenant's pin quota)
    hinted: bool = False  # set by a harness's `retain_s`: yields in every mode


class Retention:
    """Pins sessions' paths during tool calls; the scheduler asks it when turns end."""

    def __init__(self, cfg: AgentConfig, cache: PrefixCache, sessions: Sessions) -> None:
        self.cfg = cfg
        self.cache = cache
        self.sessions = sessions
        self.pins: dict[str, Pin] = {}
        self.pinned_pages = 0
        self.fleet: deque[float] = deque(maxlen=FLEET_SAMPLES)
        self.own: dict[str, list[float]] = {}
        self.queue_wait_s = 0.0  # smoothed wait of admitted requests

    @property
    def enabled(self) -> bool:
        return self.cfg.retention != "none"

    @property
    def yields(self) -> bool:
        return self.cfg.retention == "return_aware"

    # -- observations ---------------------------------------------------------------
    def on_arrival(self, session_id: str, gap_s: float | None, after_tool: bool) -> bool:
        """A turn of `session_id` arrived `gap_s` after its last one ended: unpin, learn the gap.
        True when a pin was released."""
        released = self.release(session_id)
        if gap_s is not None and after_tool and self.enabled:
            self.fleet.append(gap_s)
            own = self.own.setdefault(session_id, [])
            own.append(gap_s)
            del own[:-OWN_KEPT]
        return released

    def on_admit(self, waited_s: float) -> None:
        self.queue_wait_s = 0.9 * self.queue_wait_s + 0.1 * waited_s

    # -- pins ---------------------------------------------------------------------
    def on_turn_end(
        self,
        session_id: str,
        stop: str | None,
        context: int,
        cost: PlannerCost,
        now: float,
        expected_gap_s: float | None = None,
    ) -> None:
        """The turn of `session_id` ended with `context` tokens cached on its path: pin or not.
        `expected_gap_s` (a harness's hint) replaces the learned tool times."""
        if not self.enabled or (stop != "tool_use" and expected_gap_s is None):
            return
        info = self.sessions.record(session_id)
        device = self.cache.capacity(Tier.DEVICE)
        pages = context // self.cache.page_size
        if info.leaf is None or pages == 0 or device <= 0:
            return
        if self.pinned_pages + pages > self.cfg.max_pinned_fraction * device:
            return
        ttl = self.ttl(session_id, context, pages / device, cost, expected_gap_s)
        if ttl > 0:
            self.pin(session_id, pages, now + ttl)

    def pin(
        self, session_id: str, pages: int, expires: float, tenant: str = "", hinted: bool = False
    ) -> None:
        """Pin the path of `session_id`'s last turn (`pages` long) until `expires`."""
        info = self.sessions.record(session_id)
        self.release(session_id)
        self.pins[session_id] = Pin(self.cache.lock(info.leaf), pages, expires, tenant, hinted)
        self.pinned_pages += pages

    def ttl(
        self,
        session_id: str,
        context: int,
        share: float,
        cost: PlannerCost,
        expected_gap_s: float | None = None,
    ) -> float:
        own = self.own.get(session_id, []) if self.yields else []
        if expected_gap_s is not None:
            samples = np.asarray([expected_gap_s])
        elif len(own) >= OWN_SAMPLES:
            samples = np.asarray(own)
        elif len(self.fleet) >= self.cfg.min_samples:
            samples = np.asarray(self.fleet)
        else:
            return self.cfg.default_ttl_s
        reload = cost.recompute_s(0, context)
        if self.cache.has_host and choose(cost, Tier.HOST, 0, context) == "load":
            reload = cost.load_s(context, Tier.HOST)
        benefit = reload + self.queue_wait_s
        tau = best_ttl(samples, benefit, share, self.cfg.memory_price)
        return tau * GAP_SLACK if expected_gap_s is not None else tau

    def pinned_tokens(self, tenant: str, but: str) -> int:
        """Tokens the pins of `tenant`'s sessions other than `but` hold."""
        ps = self.cache.page_size
        return sum(p.pages * ps for s, p in self.pins.items() if p.tenant == tenant and s != but)

    def release(self, session_id: str) -> bool:
        pin = self.pins.pop(session_id, None)
        if pin is None:
            return False
        self.cache.unlock(pin.lock)
        self.pinned_pages -= pin.pages
        return True

    def forget(self, session_ids: Iterable[str]) -> None:
        """The sessions' records are gone: release their pins, drop their gaps."""
        for sid in session_ids:
            self.release(sid)
            self.own.pop(sid, None)

    def expire(self, now: float) -> bool:
        """Release every pin past its TTL; True when any was."""
        done = [sid for sid, p in self.pins.items() if p.expires <= now]
        for sid in done:
            self.release(sid)
        return bool(done)

    def yield_one(self) -> bool:
        """A queued request needs memory: release the pin expected to be needed last
        (any with `return_aware`, a harness's hinted ones in every mode)."""
        pins = [s for s, p in self.pins.items() if self.yields or p.hinted]
        if not pins:
            return False
        sid = max(pins, key=lambda s: (self.pins[s].expires, s))
        return self.release(sid)

    def next_expiry(self) -> float | None:
        return min((p.expires for p in self.pins.values()), default=None)


class WaitingQueue:
    """The scheduler's queue, kept in `queue_key` order (ties in arrival order)."""

    def __init__(self) -> None:
        self._keys: list[float] = []
        self._seqs: list[Sequence] = []

    def insert(self, seq: Sequence, key: float) -> None:
        i = bisect.bisect_right(self._keys, key)
        self._keys.insert(i, key)
        self._seqs.insert(i, seq)

    def appendleft(self, seq: Sequence) -> None:
        self._keys.insert(0, -math.inf)
        self._seqs.insert(0, seq)

    def remove(self, seq: Sequence) -> None:
        i = next(i for i, s in enumerate(self._seqs) if s is seq)
        del self._keys[i], self._seqs[i]

    def __iter__(self) -> Iterator[Sequence]:  # callers do not change the queue meanwhile
        return iter(self._seqs)

    def __len__(self) -> int:
        return len(self._seqs)

    def __bool__(self) -> bool:
        return bool(self._seqs)

    def __getitem__(self, i: int) -> Sequence:
        return self._seqs[i]

    def __contains__(self, seq: object) -> bool:
        return any(s is seq for s in self._seqs)
