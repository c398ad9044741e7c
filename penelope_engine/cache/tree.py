r"""A radix tree over pages whose pages may be holes. No torch here.

Each node holds a run of consecutive pages of one path, as flat numpy arrays:

    hashes[i]  chained page id (penelope_engine.cache.pages)
    device[i]  device page index, or -1
    host[i]    host page index, or -1
    stored[i]  True when the Arrow store holds a copy

A page that is nowhere (device -1, host -1, not stored) is a *hole*: it keeps
its id and its children, so matching walks through it. `match` never mutates;
`TreeMatch` is an immutable value. Running requests lock their path (a ref
count on the node and every ancestor); locked pages never move.

    root -> [shared prefix] -> [session A private ...] -> [A newer ...]
                            \-> [session B private ...]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count

import numpy as np

from penelope_engine.cache.tier import Tier

_ids = count()


@dataclass(frozen=True)
class NodeSummary:
    host_only: int  # pages on the host and not on the device
    store_only: int  # pages only in the store
    first_device: int  # index of the first device page, -1 if none
    first_host: int


class Node:
    __slots__ = (
        "id",
        "parent",
        "children",
        "start",
        "hashes",
        "device",
        "host",
        "stored",
        "lock",
        "last_access",
        "sessions",
        "pinned",
        "n_device",
        "n_host",
        "_summary",
        "tokens",
        "tenant",
    )

    def __init__(self, parent: Node | None, start: int, hashes: np.ndarray) -> None:
        self.id = next(_ids)
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.start = start  # page index of hashes[0] in the sequence
        self.hashes = hashes
        n = len(hashes)
        self.device = np.full(n, -1, dtype=np.int32)
        self.host = np.full(n, -1, dtype=np.int32)
        self.stored = np.zeros(n, dtype=bool)
        self.tokens: np.ndarray | None = None  # [pages, page_size] int32 when the caller keeps them
        self.tenant = "default"
        self.lock = 0
        self.last_access = 0.0
        self.sessions: set[str] = set()
        self.pinned = False
        self.n_device = 0  # pages with device >= 0, kept by PrefixCache
        self.n_host = 0
        self._summary: NodeSummary | None = None

    def recount(self) -> None:
        """Call after changing `device`, `host` or `stored`: refreshes the counts."""
        self.n_device = int((self.device >= 0).sum())
        self.n_host = int((self.host >= 0).sum())
        self._summary = None

    @property
    def summary(self) -> NodeSummary:
        """Per-tier facts derived from the arrays, cached until the next `recount`."""
        if self._summary is None:
            self._summary = self.fresh_summary()
        return self._summary

    def fresh_summary(self) -> NodeSummary:
        on_device = self.device >= 0
        on_host = self.host >= 0
        return NodeSummary(
            host_only=int((on_host & ~on_device).sum()),
            store_only=int((self.stored & ~on_device & ~on_host).sum()),
            first_device=int(on_device.argmax()) if on_device.any() else -1,
            first_host=int(on_host.argmax()) if on_host.any() else -1,
        )

    def summary_is_fresh(self) -> bool:
        return self._summary is None or self._summary == self.fresh_summary()

    def __len__(self) -> int:
        return len(self.hashes)

    @property
    def end(self) -> int:
        return self.start + len(self.hashes)

    @property
    def shared(self) -> bool:
        return self.pinned or len(self.sessions) >= 2

    def path_up(self) -> Iterator[Node]:
        """This node, then each ancestor up to the root (not included). The parent is read
        before a node is yielded, so the caller may trim that node out of the tree."""
        node = self
        while node.parent is not None:
            parent = node.parent
            yield node
            node = parent

    def where(self) -> np.ndarray:
        """Per-page best location code (device > host > store > hole)."""
        code = np.full(len(self.hashes), Tier.HOLE, dtype=np.int8)
        code[self.stored] = Tier.STORE
        code[self.host >= 0] = Tier.HOST
        code[self.device >= 0] = Tier.DEVICE
        return code


@dataclass(frozen=True)
class Segment:
    """Tokens [start, end) of a prompt and where their KV is."""

    start: int
    end: int
    where: Tier

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class TreeMatch:
    """What the tree knows of a page sequence, page by page (read-only arrays)."""

    nodes: tuple[Node, ...]  # nodes walked, in order; the last one may be matched partly
    num_pages: int  # pages matched (device, host, store or hole)
    where: np.ndarray  # [num_pages] location codes
    device: np.ndarray  # [num_pages] device page or -1
    host: np.ndarray  # [num_pages] host page or -1

    def segments(self, page_size: int) -> tuple[Segment, ...]:
        """Run-length segments in tokens; unmatched pages are not included."""
        if self.num_pages == 0:
            return ()
        w = self.where
        cuts = np.flatnonzero(w[1:] != w[:-1]) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [len(w)]))
        return tuple(
            Segment(int(s) * page_size, int(e) * page_size, Tier(int(w[s])))
            for s, e in zip(starts, ends)
        )


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class PageTree:
    """The radix tree: structure only. Tier bookkeeping lives in `cache.placement`."""

    def __init__(self) -> None:
        self.root = Node(None, 0, np.empty(0, dtype=np.uint64))
        self.size = 0  # nodes under the root
        self.root.pinned = True

    def match(self, hashes: np.ndarray) -> TreeMatch:
        nodes: list[Node] = []
        parts: list[tuple[Node, int]] = []
        node, i, n = self.root, 0, len(hashes)
        while i < n:
            child = node.children.get(int(hashes[i]))
            if child is None:
                break
            m = min(len(child), n - i)
            diff = np.flatnonzero(child.hashes[:m] != hashes[i : i + m])
            k = int(diff[0]) if len(diff) else m
            nodes.append(child)
            parts.append((child, k))
            i += k
            if k < len(child):
                break
            node = child
        if not parts:
            empty = np.empty(0, dtype=np.int32)
            return TreeMatch((), 0, _frozen(np.empty(0, np.int8)), _frozen(empty), _frozen(empty))
        where = np.concatenate([nd.where()[:k] for nd, k in parts])
        device = np.concatenate([nd.device[:k] for nd, k in parts])
        host = np.concatenate([nd.host[:k] for nd, k in parts])
        return TreeMatch(tuple(nodes), i, _frozen(where), _frozen(device), _frozen(host))

    def split(self, node: Node, k: int) -> Node:
        """Split `node` after its first `k` pages; return the new upper node."""
        assert 0 < k < len(node), (k, len(node))
        parent = node.parent
        assert parent is not None
        upper = Node(parent, node.start, node.hashes[:k].copy())
        upper.device, upper.host, upper.stored = (
            node.device[:k].copy(),
            node.host[:k].copy(),
            node.stored[:k].copy(),
        )
        upper.lock = node.lock
        upper.last_access = node.last_access
        upper.sessions = set(node.sessions)
        upper.pinned = node.pinned
        upper.tenant = node.tenant
        node.hashes, node.device = node.hashes[k:].copy(), node.device[k:].copy()
        node.host, node.stored = node.host[k:].copy(), node.stored[k:].copy()
        if node.tokens is not None:
            upper.tokens, node.tokens = node.tokens[:k].copy(), node.tokens[k:].copy()
        node.start += k
        parent.children[int(upper.hashes[0])] = upper
        upper.children[int(node.hashes[0])] = node
        node.parent = upper
        upper.recount()
        node.recount()
        self.size += 1
        return upper

    def add_child(
        self,
        parent: Node,
        hashes: np.ndarray,
        tenant: str = "default",
        tokens: np.ndarray | None = None,
    ) -> Node:
        child = Node(parent, parent.end, hashes.copy())
        child.tenant = tenant
        child.tokens = None if tokens is None else tokens.astype(np.int32)
        parent.children[int(hashes[0])] = child
        self.size += 1
        return child

    def remove(self, node: Node) -> None:
        """Detach a childless, unlocked node."""
        assert not node.children and node.lock == 0 and node.parent is not None
        del node.parent.children[int(node.hashes[0])]
        node.parent = None
        self.size -= 1

    def truncate(self, node: Node, keep: int) -> None:
        """Drop pages [keep, len) of a childless node (the LRU tail eviction)."""
        assert not node.children and 0 < keep <= len(node)
        node.hashes, node.device = node.hashes[:keep], node.device[:keep]
        node.host, node.stored = node.host[:keep], node.stored[:keep]
        if node.tokens is not None:
            node.tokens = node.tokens[:keep]
        node.recount()

    def lock(self, node: Node, delta: int) -> None:
        for n in node.path_up():
            n.lock += delta
            assert n.lock >= 0, "unbalanced unlock"

    def locked_nodes(self) -> int:
        """Nodes with a lock. A lock counts on a node and every ancestor (`lock`), so the
        locked nodes hang together under the root: walk those only, not the whole tree."""
        locked, stack = 0, [n for n in self.root.children.values() if n.lock > 0]
        while stack:
            node = stack.pop()
            locked += 1
            stack.extend(child for child in node.children.values() if child.lock > 0)
        return locked

    def iter_nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())
