"""The simulator's tiers: copies that take time on a clock, over real tiers or none.

`TimedTiers` wraps any tiers (the engine's `TorchTiers`, or `NullTiers`) and
charges every copy to one PCIe channel per direction on the simulated clock:
device-to-host (demotions, write-through) and host-to-device (loads from the
host and the store). It is the cache's `TierIO` and the scheduler's
`SchedulerTiers`, so an admission's `ready_at` is when its own demotions and
loads are done, behind whatever the channel was already carrying.

With `layers` > 1 loads stream layer by layer, overlapped with the forward
pass, as SGLang HiCache loads host KV back (a per-layer event on its load
stream; the forward of layer i waits only for layer i's copy): an
admission's `ready_at` is when the first layer of its loads is in (a
`layers`-th of the copy time), and `copies_done(ready)` when all of them
are, which the step that runs the request's first chunk cannot end before
(`bench.sim.replica.Replica`). With `layers` 1, the default, a request's
prefill waits for its whole copy, while other requests' steps run (Penelope's
own tiers copy whole pages before the forward, `penelope_engine.tiers.copies`).

Reads from the store also take the store's own channel (`store_free`): a
demand load waits for it and for the PCIe channel, a read ahead
(`read_ahead`, the prefetcher's) only for it, since it lands in host memory
and is no admission's copy.

`FreeCopies` is a cost model whose copies take no time: a what-if that bounds
every prefetch and every overlap of loads with the forward.

`NullTiers` moves no bytes: host copies always succeed, and the store is a set
of (tenant, page id) that spilled pages join (no byte budget).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from bench.sim.costmodel import CostModel, StepLoad
from penelope_engine.cache.prefix_cache import TierIO
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node
from penelope_engine.tiers.contract import ReadAhead, SchedulerTiers

READ_WAIT_S = 60.0  # over real tiers: longest wait for a read the clock says is done


class FreeCopies:
    """`inner` with copies between tiers that take no time (a what-if: what no prefetch or
    overlap of loads can beat); compute costs what `inner` says."""

    def __init__(self, inner: CostModel) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def kv_bytes_per_token(self) -> int:
        return self.inner.kv_bytes_per_token

    def step_time(self, load: StepLoad) -> float:
        return self.inner.step_time(load)

    def token_cost(self, position: int) -> float:
        return self.inner.token_cost(position)

    def recompute_s(self, start: int, length: int) -> float:
        return self.inner.recompute_s(start, length)

    def load_time(self, tokens: int, tier: Tier) -> float:
        return 0.0

    def load_s(self, length: int, tier: Tier) -> float:
        return 0.0

    def offload_time(self, tokens: int) -> float:
        return 0.0

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "free_copies": True}


class NullTiers:
    """Tiers without bytes; the store remembers which pages were spilled to it."""

    def __init__(self) -> None:
        self.stored: set[tuple[str, int]] = set()

    def begin(self) -> None:
        pass

    def ready_at(self, now: float) -> float:
        return now

    def device_to_host(self, device_pages: np.ndarray, host_pages: np.ndarray) -> bool:
        return True

    def host_to_device(self, host_pages: np.ndarray, device_pages: np.ndarray) -> bool:
        return True

    def spill(self, node: Node, idx: np.ndarray) -> bool:
        self.stored.update((node.tenant, int(h)) for h in node.hashes[idx])
        return True

    def store_run(self, hashes: np.ndarray, tenant: str) -> int:
        n = 0
        while n < len(hashes) and (tenant, int(hashes[n])) in self.stored:
            n += 1
        return n

    def load_store(
        self, hashes: np.ndarray, tokens: np.ndarray, tenant: str, device_pages: np.ndarray
    ) -> np.ndarray:
        return np.array([(tenant, int(h)) in self.stored for h in hashes], dtype=bool)

    def read_ahead(self, hashes: np.ndarray, tokens: np.ndarray, tenant: str) -> ReadAhead:
        return Found(np.array([(tenant, int(h)) in self.stored for h in hashes], dtype=bool))


class Found:
    """A read that is over: `NullTiers`' (nothing to copy) and, once its time has passed,
    `TimedTiers`' over any tiers."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask

    def done(self, now: float) -> bool:
        return True

    def wait(self, timeout_s: float) -> bool:
        return True

    def found(self) -> np.ndarray:
        return self.mask

    def install(self, idx: np.ndarray, host_pages: np.ndarray) -> bool:
        return True


class TimedRead:
    """A read ahead that takes the store's time on the simulated clock: done at `done_at`
    (the engine's own read, under it, is awaited then: the clock says when it ends)."""

    def __init__(self, inner: ReadAhead, done_at: float) -> None:
        self.inner, self.done_at = inner, done_at

    def done(self, now: float) -> bool:
        return now >= self.done_at and self.inner.wait(READ_WAIT_S)

    def wait(self, timeout_s: float) -> bool:
        return self.inner.wait(timeout_s)

    def found(self) -> np.ndarray:
        return self.inner.found()

    def install(self, idx: np.ndarray, host_pages: np.ndarray) -> bool:
        return self.inner.install(idx, host_pages)


class _Tiers(TierIO, SchedulerTiers, Protocol):
    """Both faces of a tier implementation (the cache's and the scheduler's)."""


class TimedTiers:
    def __init__(
        self,
        inner: _Tiers | NullTiers,
        cost: CostModel,
        page_size: int,
        clock: Callable[[], float],
        layers: int = 1,
    ) -> None:
        if layers < 1:
            raise ValueError(f"layers must be >= 1, got {layers}")
        self.inner, self.cost, self.page_size, self.clock = inner, cost, page_size, clock
        self.layers = layers  # > 1: loads stream layer by layer, overlapped with the forward
        self.d2h_free = self.h2d_free = 0.0  # when each PCIe channel is next idle
        self.store_free = 0.0  # when the store's channel is next idle (reads ahead, loads)
        self._ready = -math.inf  # when the current admission's copies are done
        self._load_start: float | None = None  # when its first load starts (None: no load)
        self._streaming: dict[float, float] = {}  # layer-wise: first layer in -> all in
        self.d2h_pages = self.h2d_pages = self.read_ahead_pages = 0

    def begin(self) -> None:
        self._ready = -math.inf
        self._load_start = None

    def ready_at(self, now: float) -> float:
        """When the admission's prefill may start: its copies are done, or, layer by layer,
        the first layer of its loads is in (after its demotions, which the loads follow)."""
        done = max(now, self._ready)
        if self.layers == 1 or self._load_start is None:
            return done
        # the admission's loads run back to back on the channel: one stream, layer by layer
        first = self._load_start + (self._ready - self._load_start) / self.layers
        self._streaming = {r: d for r, d in self._streaming.items() if d > now}
        self._streaming[first] = done  # distinct: one channel, and each copy takes time
        return max(now, first)

    def copies_done(self, ready: float) -> float:
        """When every copy of the admission whose `ready_at` was `ready` is done (`ready`
        itself unless its loads stream layer by layer)."""
        return self._streaming.get(ready, ready)

    def device_to_host(self, device_pages: np.ndarray, host_pages: np.ndarray) -> bool:
        ok = self.inner.device_to_host(device_pages, host_pages)
        n = len(device_pages)
        if n:
            start = max(self.clock(), self.d2h_free)
            self.d2h_free = start + self.cost.offload_time(n * self.page_size)
            self._ready = max(self._ready, self.d2h_free)
            self.d2h_pages += n
        return ok

    def _load(self, pages: int, tier: Tier) -> None:
        if pages:  # a load starts once this admission's demotions are done
            start = max(self.clock(), self.h2d_free, self._ready)
            if tier == Tier.STORE:  # and a store load once the store's channel is free
                start = max(start, self.store_free)
            if self._load_start is None:
                self._load_start = start
            self.h2d_free = start + self.cost.load_time(pages * self.page_size, tier)
            if tier == Tier.STORE:
                self.store_free = self.h2d_free
            self._ready = self.h2d_free
            self.h2d_pages += pages

    def host_to_device(self, host_pages: np.ndarray, device_pages: np.ndarray) -> bool:
        ok = self.inner.host_to_device(host_pages, device_pages)
        self._load(len(host_pages) if ok else 0, Tier.HOST)
        return ok

    def spill(self, node: Node, idx: np.ndarray) -> bool:
        return self.inner.spill(node, idx)  # written behind: delays no request

    def store_run(self, hashes: np.ndarray, tenant: str) -> int:
        return self.inner.store_run(hashes, tenant)

    def load_store(
        self, hashes: np.ndarray, tokens: np.ndarray, tenant: str, device_pages: np.ndarray
    ) -> np.ndarray:
        loaded = self.inner.load_store(hashes, tokens, tenant, device_pages)
        self._load(int(loaded.sum()), Tier.STORE)
        return loaded

    def read_ahead(self, hashes: np.ndarray, tokens: np.ndarray, tenant: str) -> ReadAhead | None:
        """A read ahead on the store's channel, behind what it already carries: store to
        host memory, so the PCIe channels and this admission's `ready_at` are untouched."""
        inner = self.inner.read_ahead(hashes, tokens, tenant)
        if inner is None:
            return None
        start = max(self.clock(), self.store_free)
        self.store_free = start + self.cost.load_time(len(hashes) * self.page_size, Tier.STORE)
        self.read_ahead_pages += len(hashes)
        return TimedRead(inner, self.store_free)
