"""Node.summary caches per-tier facts; every change to the arrays must refresh it."""

import numpy as np

from penelope_engine.cache.tree import Node, PageTree


def _node(n: int = 6) -> Node:
    tree = PageTree()
    return tree.add_child(tree.root, np.arange(1, n + 1, dtype=np.uint64))


def test_summary_counts_each_tier_once() -> None:
    node = _node()
    node.device[[2, 3]] = [10, 11]
    node.host[[1, 3, 4]] = [5, 6, 7]
    node.stored[[0, 1, 2]] = True
    node.recount()
    s = node.summary
    assert (s.host_only, s.store_only, s.first_device, s.first_host) == (2, 1, 2, 1)


def test_recount_refreshes_a_cached_summary() -> None:
    node = _node()
    node.device[4] = 3
    node.recount()
    assert node.summary.first_device == 4
    node.device[1] = 9
    assert not node.summary_is_fresh()  # the invariant checker's test catches the stale cache
    node.recount()
    assert node.summary.first_device == 1 and node.summary_is_fresh()


def test_split_and_truncate_leave_fresh_summaries() -> None:
    tree = PageTree()
    node = tree.add_child(tree.root, np.arange(1, 9, dtype=np.uint64))
    node.host[[0, 5]] = [1, 2]
    node.recount()
    assert node.summary.first_host == 0
    upper = tree.split(node, 3)
    assert upper.summary.first_host == 0 and node.summary.first_host == 2
    tree.truncate(node, 2)
    assert node.summary.first_host == -1 and node.summary.host_only == 0
