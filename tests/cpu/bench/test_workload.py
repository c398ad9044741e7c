"""Seeded session sampling and arrivals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bench.sessions import SYSTEM, TOOLS, PrefixBlock, Scale, Session, Trace, Turn
from bench.workload import WorkloadConfig, clip_workload, sample_workload


def _trace(n: int = 6) -> Trace:
    turn = Turn(0.0, 0.0, ((1, 2),), 128, 4, "tool_use", 10)
    tops = [Session(f"s{i}", (turn,), 64, f"s{i}", trace_start_s=3.0 * i) for i in range(n)]
    kid = Session("s0/a1", (turn,), 64, "s0", parent_id="s0", after_turn=0, start_delay_s=2.0)
    grandkid = Session("s0/a1/b", (turn,), 64, "s0", parent_id="s0/a1", after_turn=0)
    return Trace("claude_code", (*tops, kid, grandkid), Scale(), 64)


def test_same_seed_same_workload() -> None:
    cfg = WorkloadConfig(sessions=4, seed=3)
    a, b = sample_workload(_trace(), cfg), sample_workload(_trace(), cfg)
    assert [s.id for s in a.sessions] == [s.id for s in b.sessions]
    assert a.starts == b.starts
    c = sample_workload(_trace(), WorkloadConfig(sessions=4, seed=4))
    assert ([s.id for s in c.sessions], c.starts) != ([s.id for s in a.sessions], a.starts)


def test_poisson_starts_are_staggered() -> None:
    w = sample_workload(_trace(), WorkloadConfig(sessions=6, seed=0, mean_interarrival_s=5.0))
    starts = np.array(w.starts)
    assert starts[0] == 0.0 and (np.diff(starts) >= 0).all() and starts[-1] > 0
    assert w.trace["time_scale"] == 1.0 and w.trace["length_scale"] == 1.0


def test_trace_arrivals_keep_real_offsets() -> None:
    w = sample_workload(_trace(), WorkloadConfig(sessions=3, seed=1, arrivals="trace"))
    by_id = dict(zip([s.id for s in w.sessions], w.starts))
    t0 = min(s.trace_start_s for s in w.sessions)
    assert all(by_id[s.id] == s.trace_start_s - t0 for s in w.sessions)


def test_more_sessions_than_the_trace_makes_namespaced_copies() -> None:
    w = sample_workload(_trace(3), WorkloadConfig(sessions=7, seed=0))
    ids = [s.id for s in w.sessions]
    assert len(set(ids)) == 7
    copies = [s for s in w.sessions if "#" in s.id]
    assert copies and all(s.block_scope.endswith(s.id[s.id.index("#") :]) for s in copies)


def test_copies_keep_their_originals_prefix_blocks() -> None:
    blocks = (PrefixBlock(SYSTEM, "2208", 6), PrefixBlock(TOOLS, "12439", 4))
    trace = _trace(2)
    trace = dataclasses.replace(
        trace, sessions=tuple(dataclasses.replace(s, prefix_blocks=blocks) for s in trace.sessions)
    )
    w = sample_workload(trace, WorkloadConfig(sessions=5, seed=0))
    assert all(s.prefix_blocks == blocks for s in w.all_sessions)


def test_subagents_come_with_their_parent() -> None:
    w = sample_workload(_trace(1), WorkloadConfig(sessions=1, seed=0))
    assert [c.id for c in w.children["s0"]] == ["s0/a1"]
    assert [c.id for c in w.children["s0/a1"]] == ["s0/a1/b"]
    assert len(w.all_sessions) == 3
    bare = sample_workload(_trace(1), WorkloadConfig(sessions=1, include_subagents=False))
    assert bare.children == {} and len(bare.all_sessions) == 1


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="sessions"):
        WorkloadConfig(sessions=0)
    with pytest.raises(ValueError, match="arrivals"):
        WorkloadConfig(sessions=1, arrivals="uniform")


def test_clip_keeps_first_turns_caps_outputs_and_gaps() -> None:
    turns = tuple(
        Turn(5.0 * k, 0.0, ((1, 2 + k),), 128 + 64 * k, 40, "tool_use", 10) for k in range(4)
    )
    s = Session("s0", turns, 64, "s0")
    late = Session("s0/late", turns[:1], 64, "s0", parent_id="s0", after_turn=3)
    early = Session("s0/early", turns, 64, "s0", parent_id="s0", after_turn=1)
    trace = Trace("claude_code", (s, late, early), Scale(), 64)
    w = clip_workload(sample_workload(trace, WorkloadConfig(sessions=1)), 2, 8, max_think_s=4.0)
    (top,) = w.sessions
    assert len(top.turns) == 2 and all(t.output_tokens == 8 for t in top.turns)
    assert [t.think_time_s for t in top.turns] == [0.0, 4.0] and top.tool_time_s == 4.0
    assert [c.id for c in w.children["s0"]] == ["s0/early"]  # the one after turn 3 is gone
    assert len(w.children["s0"][0].turns) == 2 and w.starts == (0.0,)
    with pytest.raises(ValueError, match="max_turns"):
        clip_workload(w, 0, 8)


def test_cut_at_window_ends_sessions_at_their_first_overlong_request() -> None:
    from bench.workload import cut_at_window

    def t(n: int) -> Turn:
        return Turn(0.0, 0.0, ((1, 2),), n, 4, "tool_use", 10)

    long_ = Session("long", (t(100), t(200), t(50)), 64, "long")  # cut at turn 1: 2 dropped
    never = Session("never", (t(500), t(10)), 64, "never")  # gone: 2 dropped
    kid_kept = Session("long/a", (t(10),), 64, "long", parent_id="long", after_turn=0)
    kid_cut = Session("long/b", (t(10), t(10)), 64, "long", parent_id="long", after_turn=1)
    kid_gone = Session("never/a", (t(10),), 64, "never", parent_id="never", after_turn=0)
    trace = Trace("claude_code", (long_, never, kid_kept, kid_cut, kid_gone), Scale(), 64)
    wl = sample_workload(trace, WorkloadConfig(sessions=2, seed=0))
    cut, dropped = cut_at_window(wl, 150)
    assert [s.id for s in cut.sessions] == ["long"]
    assert len(cut.starts) == 1
    assert [len(s.turns) for s in cut.sessions] == [1]
    assert [k.id for k in cut.children["long"]] == ["long/a"]
    assert dropped == 2 + 2 + 2 + 1  # long's tail, never, long/b, never/a
    assert sum(len(s.turns) for s in cut.all_sessions) + dropped == sum(
        len(s.turns) for s in wl.all_sessions
    )
    with pytest.raises(ValueError):
        cut_at_window(wl, 0)
