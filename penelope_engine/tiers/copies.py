"""Moves KV bytes between the device pool, the host pool and the Arrow store.

Implements the cache's `TierIO` with torch copies. Only the scheduler thread
calls it, and each copy completes before it returns (`PageMover`: on CUDA
whole pages through a pinned ring on a side stream, synchronized), so the tree
never points at bytes in flight. A failed copy returns False and the cache
treats the page as missing.

In the store a page belongs to its tenant, or to `PUBLIC` when it is a page of
a prefix the operator declared public (`public_hashes`): those are the only
pages a tenant's look-ups find under another name than its own.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass

import numpy as np
import torch

from cache_store import ArrowSegmentStore, Segment
from penelope_engine.cache.pages import PUBLIC
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node
from penelope_engine.tiers.budget import ReadBudget
from penelope_engine.tiers.contract import ReadAhead
from penelope_engine.tiers.kv_pool import DTYPES, NAMES_OF_DTYPES, KVPool
from penelope_engine.tiers.transfer import PageMover

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PageSnapshot:
    """Consecutive pages of one owner copied out of a pool: a segment not yet built."""

    owner: str
    hashes: tuple[int, ...]
    positions: tuple[int, ...]
    tokens: np.ndarray  # [pages, page_size]
    kv: torch.Tensor  # [2, layers, pages * page_size, kv_heads, head_dim] on the CPU

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()

    def segment(self, namespace: str) -> Segment:
        return Segment(
            namespace=namespace,
            tenant=self.owner,
            page_hashes=self.hashes,
            positions=self.positions,
            token_ids=tuple(tuple(t) for t in self.tokens.tolist()),
            dtype=NAMES_OF_DTYPES[self.kv.dtype],
            shape=tuple(self.kv.shape),
            payload=memoryview(self.kv.view(torch.uint8).numpy().data).cast("B"),
        )


class TorchTiers:
    def __init__(
        self,
        device_pool: KVPool,
        host_pool: KVPool | None,
        store: ArrowSegmentStore | None = None,
        on_copy: Callable[[Tier, int, float], None] | None = None,
        public_hashes: frozenset[int] = frozenset(),
        read_budget: ReadBudget | None = None,
        spill_behind: Callable[[list[PageSnapshot]], bool] | None = None,
    ) -> None:
        self.device = device_pool
        self.read_budget = read_budget  # bounds the step's store reads (None: unbounded)
        self.host = host_pool
        self.store = store
        self.on_copy = on_copy  # (tier, bytes, seconds) of each load, for the planner
        stream = torch.cuda.Stream() if device_pool.device.type == "cuda" else None
        self.mover = PageMover(stream)  # whole pages through a pinned ring (transfer.py)
        if host_pool is not None:
            self.mover.reserve(host_pool)  # pinned once, at start: no request pays for it
        self.failures = 0
        self.public_hashes = public_hashes  # pages of operator-declared public prefixes
        self._reader: ThreadPoolExecutor | None = None  # read-ahead thread, started on first use
        # Host evictions' pages go here when set (`segment_writer.SegmentWriter`: the write-behind),
        # so a slow store never stalls the step; True once queued. None: written in line.
        self.spill_behind = spill_behind

    def owner(self, tenant: str, page_hash: int) -> str:
        """Whose page `page_hash` of `tenant` is in the store: PUBLIC for a declared prefix."""
        return PUBLIC if page_hash in self.public_hashes else tenant

    def _copy(self, src: KVPool, src_pages: np.ndarray, dst: KVPool, dst_pages: np.ndarray) -> bool:
        try:
            self.mover.copy(src, src_pages, dst, dst_pages)
            return True
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # pragma: no cover - hw faults
            self.failures += 1
            log.warning("KV copy failed (%s); the pages will be recomputed", exc)
            return False

    def device_to_host(self, device_pages: np.ndarray, host_pages: np.ndarray) -> bool:
        assert self.host is not None
        return self._copy(self.device, device_pages, self.host, host_pages)

    def host_to_device(self, host_pages: np.ndarray, device_pages: np.ndarray) -> bool:
        assert self.host is not None
        t0 = time.perf_counter()
        ok = self._copy(self.host, host_pages, self.device, device_pages)
        if ok and self.on_copy is not None:
            nbytes = len(host_pages) * self.host.bytes_per_page
            self.on_copy(Tier.HOST, nbytes, time.perf_counter() - t0)
        return ok

    def spill(self, node: Node, idx: np.ndarray) -> bool:
        """Write host pages `idx` of `node` to the store (host eviction): copied out and
        queued on `spill_behind` when there is one, else written in line."""
        if self.host is None:
            return False
        if self.spill_behind is None:
            return self.write_segments(self.host, node.host, node, idx)
        if self.store is None or self.store.writes.degraded:
            return False  # no copy for a store that refuses: the pages are recomputed
        snaps = self.snapshot(self.host, node.host, node, idx)
        return bool(snaps) and self.spill_behind(snaps)

    def write_segments(self, pool: KVPool, slots: np.ndarray, node: Node, idx: np.ndarray) -> bool:
        """Write pages `idx` of `node`, held at `slots[idx]` of `pool`, to the store."""
        if self.store is None:
            return False
        ok = True
        for snap in self.snapshot(pool, slots, node, idx):
            ok = self.store.put(snap.segment(self.store.namespace)) and ok
        return ok

    def snapshot(
        self, pool: KVPool, slots: np.ndarray, node: Node, idx: np.ndarray
    ) -> list[PageSnapshot]:
        """Copies of pages `idx` of `node` (at `slots[idx]` of `pool`), one per run of
        consecutive pages of one owner; each carries its tokens so a reader can check
        identity before using the KV."""
        if self.store is None or node.tokens is None or len(idx) == 0:
            return []
        ps = pool.page_size
        out = []
        for run in self._runs(node, idx):
            k, v = pool.read_pages(torch.from_numpy(slots[run].astype(np.int64)))
            out.append(
                PageSnapshot(
                    owner=self.owner(node.tenant, int(node.hashes[run[0]])),
                    hashes=tuple(int(h) for h in node.hashes[run]),
                    positions=tuple(int(p) * ps for p in node.start + run),
                    tokens=node.tokens[run].copy(),
                    kv=torch.stack([k, v]).cpu().contiguous(),
                )
            )
        return out

    def _runs(self, node: Node, idx: np.ndarray) -> Iterator[np.ndarray]:
        """`idx` cut where pages stop being consecutive or change owner."""
        public = np.array([int(h) in self.public_hashes for h in node.hashes[idx]], dtype=bool)
        cuts = np.flatnonzero((np.diff(idx) != 1) | (np.diff(public) != 0)) + 1
        yield from np.split(idx, cuts)

    def begin(self) -> None:
        """`SchedulerTiers`: nothing to mark, copies here finish before they return."""

    def ready_at(self, now: float) -> float:
        return now

    def store_run(self, hashes: np.ndarray, tenant: str) -> int:
        """How many of `hashes`, from the first, the store's index holds (no I/O)."""
        if self.store is None:
            return 0
        n = 0
        while n < len(hashes):
            h = int(hashes[n])
            if self.store.lookup(self.owner(tenant, h), h) is None:
                break
            n += 1
        return n

    def load_store(
        self, hashes: np.ndarray, tokens: np.ndarray, tenant: str, device_pages: np.ndarray
    ) -> np.ndarray:
        """Load pages from the store into `device_pages`; a mask of the pages that loaded.

        A page loads only when its segment is intact and holds the very tokens
        of the request at that page; anything else is a miss (recomputed), and so
        is every page when the read passes the step's budget (`ReadBudget`).
        """
        if self.read_budget is None:
            pages = self.read_store(hashes, tokens, tenant)
        else:
            pages = self.read_budget.call(
                lambda: self.read_store(hashes, tokens, tenant), [None] * len(hashes)
            )
        for i, kv in enumerate(pages):
            if kv is not None:
                self.device.write_pages(torch.tensor([int(device_pages[i])]), kv[0], kv[1])
        return np.array([kv is not None for kv in pages], dtype=bool)

    def read_store(
        self, hashes: np.ndarray, tokens: np.ndarray, tenant: str, copy: bool = False
    ) -> list[torch.Tensor | None]:
        """Each page's KV (``[2, layers, page_size, kv_heads, head_dim]``) read from the
        store, or None where its segment is missing, damaged or holds other tokens;
        `copy`: owned tensors, not views of the store's mapped bytes (a read ahead)."""
        out: list[torch.Tensor | None] = [None] * len(hashes)
        if self.store is None:
            return out
        segments: dict[str, Segment | None] = {}
        ps = self.device.page_size
        for i, h in enumerate(hashes):
            key = self.store.lookup(self.owner(tenant, int(h)), int(h))
            if key is None:
                continue
            if key not in segments:
                segments[key] = self.store.get(key)
            seg = segments[key]
            if seg is None:
                continue
            j = seg.page_index(int(h))
            if seg.token_ids[j] != tuple(int(t) for t in tokens[i]):
                continue
            with warnings.catch_warnings():  # read-only mapped bytes: we only read them
                warnings.simplefilter("ignore", UserWarning)
                kv = torch.frombuffer(seg.payload, dtype=torch.uint8).view(DTYPES[seg.dtype])
            page = kv.reshape(seg.shape)[:, :, j * ps : (j + 1) * ps]
            out[i] = page.clone() if copy else page
        return out

    def read_ahead(self, hashes: np.ndarray, tokens: np.ndarray, tenant: str) -> ReadAhead | None:
        """Read store pages on the reader thread for the host tier (`StoreReadAhead`)."""
        if self.store is None or self.host is None:
            return None
        if self._reader is None:
            self._reader = ThreadPoolExecutor(1, thread_name_prefix="penelope-read-ahead")
        job = self._reader.submit(self.read_store, hashes.copy(), tokens.copy(), tenant, True)
        return StoreReadAhead(job, self.host, len(hashes))

    def close(self) -> None:
        """Stop the reader thread; reads not started are dropped (their pages stay in the store)."""
        if self._reader is not None:
            self._reader.shutdown(wait=False, cancel_futures=True)
            self._reader = None
        if self.read_budget is not None:
            self.read_budget.close()


class StoreReadAhead:
    """`ReadAhead` of `TorchTiers`: a read on the reader thread, installed into the host pool."""

    def __init__(self, job: Future[list[torch.Tensor | None]], host: KVPool, n: int) -> None:
        self.job, self.host, self.n = job, host, n

    def done(self, now: float) -> bool:
        return self.job.done()

    def wait(self, timeout_s: float) -> bool:
        return bool(wait_futures([self.job], timeout=timeout_s).done)

    def _pages(self) -> list[torch.Tensor | None]:
        """What the read found; nothing when it is not done, was cancelled or failed."""
        if not self.job.done() or self.job.cancelled():
            return [None] * self.n
        if (exc := self.job.exception()) is not None:
            log.warning("a read ahead failed (%s); its pages stay in the store", exc)
            return [None] * self.n
        return self.job.result()

    def found(self) -> np.ndarray:
        return np.array([kv is not None for kv in self._pages()], dtype=bool)

    def install(self, idx: np.ndarray, host_pages: np.ndarray) -> bool:
        pages = self._pages()
        kv = [pages[int(i)] for i in idx]
        if not kv or any(p is None for p in kv):
            return False
        both = torch.cat(kv, dim=2)  # type: ignore[arg-type]  # [2, layers, n*ps, heads, dim]
        self.host.write_pages(torch.from_numpy(host_pages.astype(np.int64)), both[0], both[1])
        return True
