"""Penelope's victim order over SGLang's tree: shared pages last, coldest session first.

A *private chain* is what one session alone holds in the tree: the nodes from a
device leaf up to (not including) the deepest node that another path also uses
(a node with two or more children, or the *anchor* a shelved suffix's prefix
ends at), the root, or a locked node. Everything
above a chain is shared, or in use by a running request, and is left to
SGLang's own leaf-LRU eviction, which only runs once no private page is left.

    root ── shared ──┬── n1 ── n2 ── n3 (leaf)     one private chain: n1..n3
                     └── m1 (leaf)                 another: m1

Among chains and shelved suffixes (`shelf.ShelvedSuffix`), the coldest session
goes first (by default the oldest last access of its leaf; the cache passes
the hint-aware key of `sessions.SessionBook.victim_key`); within it the lowest positions go
first (`radix_cache` frees the chain's front pages and shelves the rest), so
its suffix goes last.

Nodes are duck-typed SGLang `UnifiedTreeNode`s (parent, children, key,
component_data, last_access_time); this module imports nothing of SGLang.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass
from typing import Any

from penelope_sglang.shelf import ShelvedSuffix

FULL = 0  # SGLang's ComponentType.FULL, the index of the full-attention KV on a node


@dataclass(frozen=True)
class PrivateChain:
    """Unlocked device nodes one session alone uses, from the front to its leaf."""

    nodes: tuple[Any, ...]
    hole_start: int  # tokens on the path above the chain's first node
    last_access: float

    @property
    def num_tokens(self) -> int:
        return sum(len(node.key) for node in self.nodes)


def _unlocked_device(node: Any) -> bool:
    """On the device, unlocked, and not backed up to the host inside SGLang's tree
    (HiCache write-through): such nodes are demoted SGLang's way, not shelved."""
    data = node.component_data[FULL]
    return data.value is not None and data.lock_ref == 0 and data.host_value is None


def _path_len(node: Any) -> int:
    n = 0
    while node.parent is not None:
        n += len(node.key)
        node = node.parent
    return n


def private_chain(leaf: Any, anchors: Set[int] = frozenset()) -> PrivateChain | None:
    """The private chain ending at `leaf`, or None when the leaf is not private.

    `anchors` are ids of nodes known to be shared although they have one child now:
    where shelved suffixes hang, and branch points whose other branch is gone.
    """
    if leaf.parent is None or leaf.children or leaf.id in anchors or not _unlocked_device(leaf):
        return None
    nodes = [leaf]
    top = leaf
    while (
        top.parent.parent is not None
        and len(top.parent.children) == 1
        and top.parent.id not in anchors
        and _unlocked_device(top.parent)
    ):
        top = top.parent
        nodes.append(top)
    nodes.reverse()
    return PrivateChain(tuple(nodes), _path_len(top.parent), leaf.last_access_time)


def private_chains(leaves: Iterable[Any], anchors: Set[int] = frozenset()) -> list[PrivateChain]:
    chains = (private_chain(leaf, anchors) for leaf in leaves)
    return [chain for chain in chains if chain is not None]


def _last_access(candidate: PrivateChain | ShelvedSuffix) -> Any:
    return candidate.last_access


def coldest_session(
    chains: Iterable[PrivateChain],
    shelved: Iterable[ShelvedSuffix],
    key: Callable[[PrivateChain | ShelvedSuffix], Any] = _last_access,
) -> PrivateChain | ShelvedSuffix | None:
    """The session to take device pages from next: lowest `key` (default: least
    recently used), chain or shelf alike.

    Pinned shelf records (a refill will reconnect them) and records with no
    device pages left (all on the host) are not candidates.
    """
    candidates: list[PrivateChain | ShelvedSuffix] = [*chains]
    candidates += [r for r in shelved if r.pins == 0 and r.device_len > 0]
    if not candidates:
        return None
    return min(candidates, key=key)
