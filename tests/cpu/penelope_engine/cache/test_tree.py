"""PageTree: a radix tree over pages whose pages may be holes; matching walks through them."""

from __future__ import annotations

import numpy as np
import pytest

from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import PageTree, Segment

PS = 4
HASHER = PageHasher(PS, "tree-test")


def path(*tokens: range) -> np.ndarray:
    return HASHER.hashes([t for r in tokens for t in r])


def build() -> tuple[PageTree, np.ndarray, np.ndarray]:
    """root -> [4 shared pages] -> [A: 3 pages] and [B: 2 pages]; everything on the device."""
    tree = PageTree()
    a = path(range(16), range(100, 112))
    b = path(range(16), range(200, 208))
    node = tree.add_child(tree.root, a)
    node.device[:] = np.arange(7)
    shared = tree.split(node, 4)
    other = tree.add_child(shared, b[4:])
    other.device[:] = [7, 8]
    for n in tree.iter_nodes():
        n.recount()
    return tree, a, b


def test_match_follows_each_branch_and_stops_at_the_first_unknown_page() -> None:
    tree, a, b = build()
    assert tree.match(a).num_pages == 7
    np.testing.assert_array_equal(tree.match(b).device, [0, 1, 2, 3, 7, 8])
    longer = path(range(16), range(100, 112), range(300, 308))
    assert tree.match(longer).num_pages == 7
    forked = path(range(16), range(100, 104), range(400, 408))
    m = tree.match(forked)
    assert m.num_pages == 5 and len(m.nodes) == 2  # the last node is matched partly
    assert tree.match(path(range(50, 66))).num_pages == 0
    assert tree.match(path(range(50, 66))).segments(PS) == ()


def test_match_walks_through_holes_and_reports_segments() -> None:
    tree, a, _ = build()
    a_node = tree.match(a).nodes[-1]
    a_node.device[0] = -1  # a hole right after the shared prefix
    a_node.device[1] = -1
    a_node.host[1] = 5  # ... then a page on the host, then the suffix on the device
    a_node.recount()
    m = tree.match(a)
    assert m.num_pages == 7
    assert m.where.tolist() == [Tier.DEVICE] * 4 + [Tier.HOLE, Tier.HOST, Tier.DEVICE]
    assert m.segments(PS) == (
        Segment(0, 16, Tier.DEVICE),
        Segment(16, 20, Tier.HOLE),
        Segment(20, 24, Tier.HOST),
        Segment(24, 28, Tier.DEVICE),
    )
    assert m.host[5] == 5 and m.device[4] == -1


def test_match_results_are_immutable_snapshots() -> None:
    tree, a, _ = build()
    m = tree.match(a)
    for arr in (m.where, m.device, m.host):
        with pytest.raises(ValueError):
            arr[0] = 99
    tree.match(a).nodes[-1].device[0] = -1
    assert m.device[4] == 4  # a later change does not reach an earlier result


def test_split_keeps_pages_locks_and_sessions_on_both_halves() -> None:
    tree, a, _ = build()
    leaf = tree.match(a).nodes[-1]
    leaf.sessions.add("A")
    tree.lock(leaf, +1)
    upper = tree.split(leaf, 1)
    assert (upper.start, len(upper), leaf.start, len(leaf)) == (4, 1, 5, 2)
    assert upper.lock == leaf.lock == 1 and upper.sessions == {"A"}
    assert leaf.parent is upper and upper.children[int(leaf.hashes[0])] is leaf
    np.testing.assert_array_equal(tree.match(a).device, np.arange(7))
    tree.lock(leaf, -1)
    assert all(n.lock == 0 for n in tree.iter_nodes())


def test_unbalanced_unlock_is_caught() -> None:
    tree, a, _ = build()
    with pytest.raises(AssertionError, match="unbalanced"):
        tree.lock(tree.match(a).nodes[-1], -1)


def test_remove_and_truncate_only_touch_leaves() -> None:
    tree, a, b = build()
    a_leaf, b_leaf = tree.match(a).nodes[-1], tree.match(b).nodes[-1]
    tree.truncate(a_leaf, 1)
    assert tree.match(a).num_pages == 5
    tree.remove(b_leaf)
    assert tree.match(b).num_pages == 4
    with pytest.raises(AssertionError):
        tree.remove(tree.match(a).nodes[0])  # still has a child
