"""One simulated replica's KV cache: the real `PrefixCache`, policies and planner.

The simulator drives the engine's cache exactly as the engine's scheduler
does (match the prompt's full pages, lock the matched path, allocate device
pages for everything not on the device, ask the planner whether each host or
store run is loaded or recomputed, insert after prefill and at the end of the
turn, write through to the host, free the request's leftovers). Only the
bytes are missing: `SimTierIO` counts the pages it is asked to copy so the
replica can charge PCIe time for them.

Page layout of an admitted request (page = position // page_size):

    |-- matched: device | host | hole ... --|-- new prompt pages --|-- output --|
      reused / loaded / recomputed            computed               decoded
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.costmodel import CostModel, page_cost_fn
from penelope_engine import planner
from penelope_engine.cache import LockHandle, PrefixCache
from penelope_engine.errors import CapacityError
from penelope_engine.protocol import SessionDigest
from penelope_engine.tree import DEVICE, HOLE, HOST, STORE, Node

TIERS = ("gpu", "gpu+cpu")


class SimTierIO:
    """A `TierIO` that moves no bytes and counts the pages it was asked to move."""

    def __init__(self) -> None:
        self.d2h_pages = 0
        self.spilled_pages = 0

    def device_to_host(self, device_pages: np.ndarray, host_pages: np.ndarray) -> bool:
        self.d2h_pages += len(device_pages)
        return True

    def spill(self, node: Node, idx: np.ndarray) -> bool:
        self.spilled_pages += len(idx)
        return True


@dataclass(frozen=True)
class CacheSetup:
    policy: str
    page_size: int
    device_pages: int
    host_pages: int = 0
    namespace: str = "sim"

    def __post_init__(self) -> None:
        if self.page_size < 1 or self.device_pages < 1 or self.host_pages < 0:
            raise ValueError(f"invalid cache setup {self}")


@dataclass(eq=False)
class Admission:
    """The cache side of one admitted request (mutated as it runs)."""

    hashes: np.ndarray  # page ids of the prompt's full pages
    table: np.ndarray  # device page per page of prompt + output
    owned: np.ndarray  # pages the request allocated and has not handed to the tree
    lock: LockHandle
    todo: list[tuple[int, int]]  # token ranges [start, end) to compute, in order
    device_tokens: int = 0
    host_tokens: int = 0  # loaded from the host
    store_tokens: int = 0
    recomputed_tokens: int = 0  # history the cache had lost
    new_tokens: int = 0
    load_tokens: dict[str, int] = field(default_factory=dict)
    demoted_pages: int = 0  # device pages copied to the host to make room
    history_class: str = "first"  # first | full | partial | miss (its private history)


def planner_costs(cost: CostModel) -> planner.CostModel:
    """The engine planner's constants, read off a bench cost model."""
    c0, c1 = cost.token_cost(0), cost.token_cost(1)
    big = 1 << 20
    host_s = cost.load_time(big, "host") - cost.load_time(0, "host")
    store_s = cost.load_time(big, "store") - cost.load_time(0, "store")
    nbytes = big * cost.kv_bytes_per_token
    return planner.CostModel(
        c_lin=c0,
        c_attn=c1 - c0,
        host_bytes_per_s=nbytes / host_s,
        store_bytes_per_s=nbytes / store_s,
        load_latency_s=cost.load_time(0, "host"),
        kv_bytes_per_token=cost.kv_bytes_per_token,
    )


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) runs of True in a boolean array."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2])]


class ReplicaCache:
    def __init__(self, setup: CacheSetup, cost: CostModel, clock: Callable[[], float]) -> None:
        self.setup = setup
        self.io = SimTierIO()
        self.cache = PrefixCache(
            setup.page_size,
            setup.device_pages,
            setup.host_pages,
            setup.policy,
            io=self.io,
            time_fn=clock,
            page_cost=page_cost_fn(cost, setup.page_size),
        )
        self.plan_costs = planner_costs(cost)
        self.page_size = setup.page_size

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    def fits(self, prompt_len: int, output_len: int) -> bool:
        return self.pages_for(prompt_len + output_len) <= self.setup.device_pages

    # -- admission -------------------------------------------------------------------
    def admit(
        self,
        sid: str,
        hashes: np.ndarray,
        prompt_len: int,
        output_len: int,
        reusable_pages: int,
        shared_pages: int,
    ) -> Admission | None:
        """Match, lock, allocate (evicting) and plan one request; None when it cannot fit now.

        `reusable_pages`: leading pages equal to the session's previous sequence (its history);
        `shared_pages`: leading pages of the common prefix (not private history).
        """
        ps, cache = self.page_size, self.cache
        usable = (prompt_len - 1) // ps  # the last prompt token is always computed
        match = cache.match(hashes[:usable])
        k = match.num_pages
        where = match.where[:k]
        device = where == DEVICE
        n_pages = self.pages_for(prompt_len + output_len)
        need = n_pages - int(device.sum())
        lock = cache.lock_match(match)
        before = self.io.d2h_pages
        try:
            fresh = cache.allocate(need) if cache.can_allocate(need) else None
        except CapacityError:
            fresh = None
        if fresh is None:
            cache.unlock(lock)
            return None
        cache.on_start(sid)
        table = np.empty(n_pages, dtype=np.int32)
        owned = np.ones(n_pages, dtype=bool)
        owned[:k][device] = False
        table[:k][device] = match.device[:k][device]
        table[owned] = fresh
        adm = Admission(hashes, table, owned, lock, [], demoted_pages=self.io.d2h_pages - before)
        recompute = np.zeros(self.pages_for(prompt_len), dtype=bool)
        recompute[:k] = where == HOLE
        recompute[k:] = True
        self._plan_loads(adm, where, recompute)
        reusable = min(reusable_pages, usable)
        self._account(adm, where, recompute, prompt_len, reusable, min(shared_pages, reusable))
        return adm

    def _plan_loads(self, adm: Admission, where: np.ndarray, recompute: np.ndarray) -> None:
        ps = self.page_size
        for code, tier in ((HOST, "host"), (STORE, "store")):
            for s, e in _runs(where == code):
                if planner.choose(self.plan_costs, tier, s * ps, (e - s) * ps) == "recompute":
                    recompute[s:e] = True
                else:
                    adm.load_tokens[tier] = adm.load_tokens.get(tier, 0) + (e - s) * ps

    def _account(
        self,
        adm: Admission,
        where: np.ndarray,
        recompute: np.ndarray,
        prompt_len: int,
        reusable: int,
        shared: int,
    ) -> None:
        ps = self.page_size
        adm.todo = [(s * ps, min(e * ps, prompt_len)) for s, e in _runs(recompute)]
        todo = sum(e - s for s, e in adm.todo)
        adm.device_tokens = int((where == DEVICE).sum()) * ps
        adm.host_tokens = adm.load_tokens.get("host", 0)
        adm.store_tokens = adm.load_tokens.get("store", 0)
        lost = recompute[: min(reusable, len(recompute))]
        adm.recomputed_tokens = int(lost.sum()) * ps
        adm.new_tokens = todo - adm.recomputed_tokens
        if reusable > shared:
            private = where[shared:reusable]
            found = int((private != HOLE).sum())
            full = found == reusable - shared
            adm.history_class = "full" if full else ("miss" if found == 0 else "partial")

    # -- during and after the run -----------------------------------------------------
    def insert(self, sid: str, adm: Admission, hashes: np.ndarray) -> None:
        """Hand the request's first len(hashes) pages to the tree; lock the new leaf."""
        n = len(hashes)
        if n == 0:
            return
        res = self.cache.insert(hashes, adm.table[:n], sid)
        adm.table[:n] = res.pages
        adm.owned[:n] = False
        old, adm.lock = adm.lock, self.cache.lock(res.leaf)
        self.cache.unlock(old)

    def release(self, sid: str, adm: Admission, stop_reason: str, write_through: bool) -> int:
        """End the turn: unlock, write through, free leftovers. Returns pages written through."""
        leaf = adm.lock.node
        self.cache.unlock(adm.lock)
        copied = 0
        if write_through and leaf is not None and leaf.parent is not None:
            copied = self.cache.write_through(leaf)
        self.cache.free(adm.table[adm.owned])
        adm.owned[:] = False
        self.cache.on_turn_end(sid, stop_reason)
        return copied

    def digests(self, limit: int = 1024) -> list[SessionDigest]:
        return self.cache.session_digests(limit)

    def prefix_hashes(self, limit: int = 256) -> list[int]:
        return self.cache.shared_prefix_hashes(limit)
