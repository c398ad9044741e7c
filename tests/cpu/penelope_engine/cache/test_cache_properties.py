"""Property-based tests of the eviction policies on a `PrefixCache` under random sessions.

Random sessions (a shared prefix, private histories growing turn by turn),
requests holding pages outside the tree, and paths locked across operations.
After every operation: integrity per tier, locked pages unmoved, every cached
page's KV in the slot the tree names. Around every allocation: the policy's
own ordering rules.
"""

from __future__ import annotations

import math

import pytest
from cache_testkit import CacheWorld, Checker, PrefixCache, Snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.sim.oracle import tell_next_arrival
from penelope_engine.cache.tier import Tier

SESSIONS = 4
PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])

sid = st.integers(0, SESSIONS - 1).map(lambda i: f"s{i}")
OPS = {
    "turn": st.tuples(
        sid, st.integers(0, 4), st.sampled_from(["tool_use", "end_turn"]), st.booleans()
    ),
    "fork": st.tuples(sid, sid),  # a new session continues another's history (a sub-agent)
    "hold": st.tuples(st.integers(1, 8)),
    "release": st.tuples(),
    "lock": st.tuples(sid),
    "unlock": st.tuples(sid),
    "hint": st.tuples(sid, st.one_of(st.none(), st.floats(0, 500))),
}
# Mostly turns, so that the cache fills up and evicts.
kinds = st.sampled_from(
    ["turn"] * 6 + ["fork", "fork", "hold", "release", "release", "lock", "unlock", "hint"]
)
op = kinds.flatmap(lambda k: OPS[k].map(lambda args: (k, *args)))
ops = st.lists(op, min_size=12, max_size=40)
worlds = st.fixed_dictionaries(
    {"device_pages": st.integers(6, 16), "shared_pages": st.integers(1, 3)}
)


def run(world: CacheWorld, program: list[tuple], after_op: Checker | None = None) -> None:
    for step in program:
        before = Snapshot.of(world.cache)
        kind, args = step[0], step[1:]
        if kind == "turn":
            name, new_pages, stop, write_through = args
            new_pages = max(new_pages, 0 if name in world.history else 1)
            world.turn(name, new_pages, stop, write_through)
        elif kind == "fork":
            world.fork(*args)
        elif kind == "hold":
            world.hold(args[0])
        elif kind == "release":
            world.release()
        elif kind == "lock":
            world.lock_session(args[0])
        elif kind == "unlock":
            world.unlock_session(args[0])
        else:
            tell_next_arrival(
                world.cache, world.sessions, args[0], math.inf if args[1] is None else args[1]
            )
        world.check()
        if after_op is not None:
            after_op(before, Snapshot.of(world.cache), world.cache)


# -- checks around one allocation ------------------------------------------------------
def unlocked_private(pages: dict) -> list:
    return [r for r in pages.values() if not r.locked and not r.shared]


def no_locked_page_moves(before: Snapshot, after: Snapshot, cache: PrefixCache) -> None:
    gone = before.evicted(after)
    assert not [r for r in gone.values() if r.locked], "a locked page was evicted"
    for page, rec in after.pages.items():
        assert page in before.pages, "an allocation added a page to the tree"
        assert before.pages[page].position == rec.position, "a page moved"


def shared_last(before: Snapshot, after: Snapshot, cache: PrefixCache) -> None:
    no_locked_page_moves(before, after, cache)
    gone = before.evicted(after)
    if any(r.shared for r in gone.values()):
        left = unlocked_private(before.kept(after))
        assert not left, f"a shared page went while {len(left)} private pages were evictable"


def penelope_order(before: Snapshot, after: Snapshot, cache: PrefixCache) -> None:
    """Coldest session first; within it, the lowest private positions; its suffix last."""
    shared_last(before, after, cache)
    gone, kept = before.evicted(after), before.kept(after)
    book = cache._sessions
    last_access = {s: book.record(s).last_access for s in book.ids()}
    for victim in {r.owner for r in unlocked_private(gone)}:
        colder = {
            r.owner
            for r in unlocked_private(kept)
            if r.owner != victim and last_access[r.owner] < last_access[victim]
        }
        assert not colder, f"evicted {victim} while colder sessions {colder} kept pages"
        mine = sorted(r.position for r in unlocked_private(before.pages) if r.owner == victim)
        lost = sorted(r.position for r in unlocked_private(gone) if r.owner == victim)
        assert lost == mine[: len(lost)], f"{victim}: evicted {lost}, not a prefix of {mine}"
        assert mine[-1] not in lost or lost == mine, f"{victim}: suffix evicted before its front"


def lru_order(before: Snapshot, after: Snapshot, cache: PrefixCache) -> None:
    """Leaves only, tail first (everything below an evicted page goes too), oldest leaf first."""
    no_locked_page_moves(before, after, cache)
    gone, nodes = before.evicted(after), before.nodes

    def below(node_id: int, offset: int) -> list[int]:
        node = nodes[node_id]
        pages = [d for d in node.device[offset:] if d >= 0]
        return pages + [p for c in node.children for p in below(c, 0)]

    for rec in gone.values():
        rest = below(rec.node, rec.position - nodes[rec.node].start + 1)
        assert all(p in gone for p in rest), f"page {rec.position} evicted before pages below it"
    lost_nodes = {r.node for r in gone.values()}
    if not lost_nodes:
        return
    key = lambda n: (n.last_access, -n.start)  # noqa: E731
    newest = max(key(nodes[i]) for i in lost_nodes)
    for n in nodes.values():
        leaf = all(d < 0 for c in n.children for d in nodes[c].device)
        if leaf and not n.locked and max(n.device) >= 0 and key(n) < newest:
            assert n.id in lost_nodes, f"leaf at page {n.start} kept, a more recent one evicted"


def no_holes(before: Snapshot, after: Snapshot, cache: PrefixCache) -> None:
    holes = sum(int((n.where() == Tier.HOLE).sum()) for n in cache._tree.iter_nodes())
    assert holes == 0, f"lru formed {holes} hole pages"


# -- the properties ------------------------------------------------------------------------------
@PROPERTY
@given(setup=worlds, program=ops)
def test_penelope_keeps_shared_pages_and_suffixes_and_evicts_coldest_fronts(setup, program):
    world = CacheWorld("penelope", checker=penelope_order, **setup)
    run(world, program)


@PROPERTY
@given(setup=worlds, program=ops)
def test_lru_evicts_oldest_leaves_tail_first_and_never_forms_a_hole(setup, program):
    world = CacheWorld("lru", checker=lru_order, **setup)
    run(world, program, after_op=no_holes)
    for name in world.history:
        segs = world.segments(name)
        assert segs == [] or (len(segs) == 1 and segs[0][:1] == (0,) and segs[0][2] == Tier.DEVICE)


@pytest.mark.parametrize("policy", ["greedydual", "return_aware", "oracle"])
@PROPERTY
@given(setup=worlds, program=ops)
def test_cost_and_return_aware_policies_keep_shared_pages_and_integrity(policy, setup, program):
    world = CacheWorld(policy, checker=shared_last, **setup)
    run(world, program)


@pytest.mark.parametrize("policy", ["penelope", "return_aware", "lru"])
@PROPERTY
@given(setup=worlds, host_pages=st.integers(1, 16), program=ops)
def test_host_tier_keeps_kv_identity_and_integrity_per_tier(policy, setup, host_pages, program):
    """With a host tier too, `lru` never forms a hole (demotion and host eviction together)."""
    world = CacheWorld(policy, host_pages=host_pages, checker=no_locked_page_moves, **setup)
    run(world, program, after_op=no_holes if policy == "lru" else None)


def test_lru_demotion_does_not_trade_one_victims_host_copy_for_another() -> None:
    """Found by the property above: lru takes a leaf's last two device pages, the first
    with a host copy, the last without; making host room for the last took the first's
    copy (the oldest host leaf's tail), leaving a hole between. The last page goes now."""
    world = CacheWorld("lru", device_pages=5, shared_pages=1, host_pages=4)
    assert world.turn("s1", 3, write_through=True)  # 4 host copies: the host is full
    assert world.turn("s0", 1, write_through=True)  # s0's copy evicts s1's last host copy
    assert world.hold(2)  # s1's last two device pages go
    world.check()
    assert world.holes() == 0, world.segments("s1")
    assert world.segments("s1") == [(0, 8, Tier.DEVICE), (8, 12, Tier.HOST)]
