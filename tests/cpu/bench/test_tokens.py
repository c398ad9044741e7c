"""Deterministic token ids: shared prefix, block identity, look-ahead, scale."""

from __future__ import annotations

import numpy as np

from bench.sessions import Scale, Session, Turn
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
