"""The cache's invariants, checked in full (tests and `Engine.check_integrity`). No torch.

The tree, the page allocators and the eviction index must agree: every
count and summary is fresh, no page is in the tree twice, and the pages the
allocators hand out are exactly the tree's plus those held by requests.
"""

from __future__ import annotations

import numpy as np

from penelope_engine.cache.allocator import PageAllocator
from penelope_engine.cache.evict_heap import EvictionHeaps
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import PageTree


def check_integrity(
    tree: PageTree,
    device: PageAllocator,
    host: PageAllocator,
    heaps: EvictionHeaps,
    request_pages: int = 0,
) -> None:
    """Tree and allocators agree; `request_pages` device pages are held outside the tree."""
    device.check()
    host.check()
    dev, hst = [], []
    for node in tree.iter_nodes():
        assert node.lock >= 0
        assert len(node.sessions) <= 2, "a node names more sessions than `shared` needs"
        assert node.n_device == int((node.device >= 0).sum()), "stale device count"
        assert node.n_host == int((node.host >= 0).sum()), "stale host count"
        assert node.summary_is_fresh(), "stale node summary (an array changed without recount)"
        assert heaps.holds(node, Tier.DEVICE) == (node.n_device > 0)
        assert heaps.holds(node, Tier.HOST) == (node.n_host > 0)
        assert len(node) > 0 and all(c.parent is node for c in node.children.values())
        dev.append(node.device[node.device >= 0])
        hst.append(node.host[node.host >= 0])
    assert len(dev) == tree.size, f"tree size {tree.size}, {len(dev)} nodes found"
    d = np.concatenate(dev) if dev else np.empty(0, np.int32)
    h = np.concatenate(hst) if hst else np.empty(0, np.int32)
    assert len(np.unique(d)) == len(d), "a device page is in the tree twice"
    assert len(np.unique(h)) == len(h), "a host page is in the tree twice"
    assert len(d) + request_pages == device.num_used, (
        f"device pages: tree {len(d)} + requests {request_pages} != used {device.num_used}"
    )
    assert len(h) == host.num_used, f"host pages: tree {len(h)} != used {host.num_used}"
