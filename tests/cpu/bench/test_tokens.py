"""Deterministic token ids: shared prefix, prefix blocks, block identity, look-ahead, scale."""

from __future__ import annotations

import numpy as np

from bench.sessions import SYSTEM, TOOLS, PrefixBlock, Scale, Session, Turn
from bench.tokens import TokenMap


def _turn(runs, n_in, out, prefix, think=1.0) -> Turn:
    return Turn(think, 0.0, tuple(runs), n_in, out, "tool_use", prefix)


def _session(sid="a", scope=None, prefix=100, bt=64) -> Session:
    turns = (
        _turn([(1, 3)], 3 * bt + 10, 20, prefix),
        _turn([(1, 5)], 5 * bt + 3, 30, prefix),  # extends turn 0
        _turn([(40, 3)], 3 * bt, 5, prefix),  # history rewritten
    )
    return Session(sid, turns, bt, scope or sid)


def test_deterministic_and_in_range() -> None:
    s = _session()
    a, b = TokenMap(1000, low=10), TokenMap(1000, low=10)
    for k in range(3):
        x, y = a.sequence_ids(s, k), b.sequence_ids(s, k)
        assert np.array_equal(x, y)
        assert x.min() >= 10 and x.max() < 1000
        assert len(a.input_ids(s, k)) == s.turns[k].input_tokens
        assert len(a.output_ids(s, k)) == s.turns[k].output_tokens
    assert not np.array_equal(TokenMap(1000, seed="other").input_ids(s, 0), a.input_ids(s, 0))


def test_shared_prefix_identical_across_sessions() -> None:
    tm = TokenMap(151936)
    one, two = _session("a", prefix=100), _session("b", prefix=150)
    x, y = tm.input_ids(one, 0), tm.input_ids(two, 0)
    assert np.array_equal(x[:100], y[:100])
    assert np.array_equal(x[:100], tm.shared_prefix(100))
    assert (x[100:150] != y[100:150]).mean() > 0.9  # a's private blocks vs b's prefix


def test_block_ids_are_namespaced_by_scope() -> None:
    tm = TokenMap(151936)
    x = tm.input_ids(_session("a", prefix=0), 0)
    same_scope = tm.input_ids(_session("b", scope="a", prefix=0), 0)
    other = tm.input_ids(_session("c", prefix=0), 0)
    assert np.array_equal(x[: 3 * 64], same_scope[: 3 * 64])
    assert (x[: 3 * 64] != other[: 3 * 64]).mean() > 0.9


def test_next_turn_repeats_input_and_output_when_it_extends() -> None:
    tm = TokenMap(151936)
    s = _session()
    seq0, in1 = tm.sequence_ids(s, 0), tm.input_ids(s, 1)
    assert np.array_equal(in1[: len(seq0)], seq0)  # partial block and output included
    seq1, in2 = tm.sequence_ids(s, 1), tm.input_ids(s, 2)
    assert np.array_equal(in2[:100], seq1[:100])  # only the shared prefix survives a rewrite
    assert (in2[100:] != seq1[100 : len(in2)]).mean() > 0.9


def test_scaled_blocks_keep_identity() -> None:
    bt = Scale(length=0.25).block_tokens(64)
    tm = TokenMap(151936)
    s = _session(bt=bt, prefix=25)
    in0, in1 = tm.input_ids(s, 0), tm.input_ids(s, 1)
    assert len(in0) == 3 * bt + 10 and np.array_equal(in1[: 3 * bt], in0[: 3 * bt])


def _keyed(sid: str, system: tuple[str, int], tools: tuple[str, int] | None, n_in=600) -> Session:
    """One turn of 64-token blocks whose prefix is a system block, then maybe a tools block."""
    blocks = [PrefixBlock(SYSTEM, *system)] + ([PrefixBlock(TOOLS, *tools)] if tools else [])
    prefix = sum(b.tokens for b in blocks)
    turn = _turn([(1, n_in // 64)], n_in, 8, min(prefix, n_in))
    return Session(sid, (turn,), 64, sid, prefix_blocks=tuple(blocks))


def test_prefix_blocks_are_shared_by_key() -> None:
    tm = TokenMap(151936)
    a = tm.input_ids(_keyed("a", ("2208", 100), ("12439", 200)), 0)
    same = tm.input_ids(_keyed("b", ("2208", 100), ("12439", 200)), 0)
    other_tools = tm.input_ids(_keyed("c", ("2208", 100), ("9292", 200)), 0)
    other_system = tm.input_ids(_keyed("d", ("913", 80), ("12439", 200)), 0)
    assert np.array_equal(a[:300], same[:300])  # equal keys: the whole prefix
    assert (a[300:] != same[300:]).mean() > 0.9  # own blocks after it
    assert np.array_equal(a[:100], other_tools[:100])
    assert (a[100:300] != other_tools[100:300]).mean() > 0.9
    assert (a[:80] != other_system[:80]).mean() > 0.9
    assert np.array_equal(a[100:300], other_system[80:280])  # the same tools, after it
    assert not np.array_equal(a[:100], tm.shared_prefix(100))  # not the keyless stream


def test_prefix_blocks_are_deterministic_and_seeded() -> None:
    s = _keyed("a", ("2208", 100), ("12439", 200))
    x = TokenMap(151936).input_ids(s, 0)
    warm = TokenMap(151936)
    warm.input_ids(_keyed("z", ("2208", 300), ("12439", 10)), 0)  # longer stream cached first
    assert np.array_equal(x, warm.input_ids(s, 0))
    assert (x[:300] != TokenMap(151936, seed="other").input_ids(s, 0)[:300]).mean() > 0.9


def test_block_span_places_tools_after_the_system_prompt() -> None:
    tm = TokenMap(151936)
    s = _keyed("a", ("2208", 100), ("12439", 200))
    assert tm.block_span(s, 0, SYSTEM) == (0, 100) and tm.block_span(s, 0, TOOLS) == (100, 300)
    assert tm.block_span(_keyed("b", ("2208", 100), None), 0, TOOLS) == (0, 0)
    short = _keyed("c", ("2208", 100), ("12439", 200), n_in=150)  # the input ends in the tools
    assert tm.block_span(short, 0, TOOLS) == (100, 150)
    assert np.array_equal(tm.input_ids(short, 0), tm.input_ids(s, 0)[:150])


def test_shared_prefixes_are_with_any_earlier_prompt_and_a_refused_one_shares_nothing() -> None:
    from bench.tokens import shared_prefixes

    assert shared_prefixes([[1, 2, 3], [1, 2, 9], None, [1, 2, 9, 4], [7]]) == [0, 2, 0, 3, 0]
