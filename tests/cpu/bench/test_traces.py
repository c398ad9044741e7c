"""Trace loaders: both formats, scaling, subagents, Mooncake continuation detection."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bench.sessions import SYSTEM, TOOLS, PrefixBlock, Scale
from bench.traces import (
    DEFAULT_TRACE,
    MOONCAKE_TRACE,
    load_claude_code,
    load_mooncake,
    load_trace,
    runs_of,
)


def _req(t, n_in, out, runs, stop="tool_use", think=None, kind="n", api=1.0):
    r = {
        "t": t,
        "type": kind,
        "in": n_in,
        "out": out,
        "hash_runs": runs,
        "stop": stop,
        "api_time": api,
    }
    if think is not None:
        r["think_time"] = think
    return r


def _claude_file(tmp_path: Path) -> Path:
    sub = {
        "t": 20.0,
        "type": "subagent",
        "agent_id": "agent_001",
        "tool_tokens": 64,
        "system_tokens": 64,
        "requests": [
            _req(0.0, 200, 10, [[900, 3]], think=0.0),
            _req(5.0, 300, 12, [[900, 4]], think=2.0),
        ],
    }
    sessions = [
        {
            "id": "s1",
            "block_size": 64,
            "tool_tokens": 100,
            "system_tokens": 60,
            "requests": [
                _req(0.0, 200, 30, [[1, 3]], think=0.0),
                _req(10.0, 330, 40, [[1, 5]], think=4.0),
                sub,
                _req(50.0, 500, 7, [[1, 7]], stop="end_turn"),  # no think_time: from t and api_time
            ],
        },
        {
            "id": "s2",
            "block_size": 64,
            "tool_tokens": 100,
            "system_tokens": 28,
            "requests": [_req(0.0, 129, 5, [[1, 2]], think=0.0, kind="s", stop="")],
        },
    ]
    path = tmp_path / "cc.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for s in sessions:
            f.write(json.dumps(s) + "\n")
    return path


def test_claude_code_turns_and_subagent(tmp_path: Path) -> None:
    trace = load_claude_code(_claude_file(tmp_path))
    s1, child, s2 = trace.sessions
    assert [t.input_tokens for t in s1.turns] == [200, 330, 500]
    assert [t.output_tokens for t in s1.turns] == [30, 40, 7]
    assert [t.think_time_s for t in s1.turns] == [0.0, 4.0, 50.0 - 11.0]
    assert s1.turns[1].block_ids().tolist() == [1, 2, 3, 4, 5]
    assert s1.turns[2].stop_reason == "end_turn"
    assert all(t.shared_prefix_tokens == 160 for t in s1.turns)
    assert s1.tool_time_s == 4.0 + 39.0
    assert child.id == "s1/agent_001" and child.parent_id == "s1"
    assert child.after_turn == 1 and child.start_delay_s == 20.0 - 11.0
    assert child.block_scope == "s1" and child.turns[0].shared_prefix_tokens == 128
    assert s2.turns[0].stop_reason == "" and s2.turns[0].shared_prefix_tokens == 128


def test_claude_code_prefix_blocks_follow_the_recorded_counts(tmp_path: Path) -> None:
    s1, child, s2 = load_claude_code(_claude_file(tmp_path)).sessions
    assert s1.prefix_blocks == (PrefixBlock(SYSTEM, "60", 60), PrefixBlock(TOOLS, "100", 100))
    assert child.prefix_blocks == (PrefixBlock(SYSTEM, "64", 64), PrefixBlock(TOOLS, "64", 64))
    assert s2.prefix_blocks == (PrefixBlock(SYSTEM, "28", 28), PrefixBlock(TOOLS, "100", 100))
    half = load_claude_code(_claude_file(tmp_path), Scale(length=0.5)).sessions[0]
    assert half.prefix_blocks == (PrefixBlock(SYSTEM, "60", 30), PrefixBlock(TOOLS, "100", 50))
    assert half.turns[0].shared_prefix_tokens == 80


def test_claude_code_without_tools_has_only_a_system_block(tmp_path: Path) -> None:
    d = {"id": "s", "block_size": 64, "tool_tokens": 0, "system_tokens": 70}
    d["requests"] = [_req(0.0, 200, 5, [[1, 3]], think=0.0)]
    path = tmp_path / "bare.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(d) + "\n")
    (s,) = load_claude_code(path).sessions
    assert s.prefix_blocks == (PrefixBlock(SYSTEM, "70", 70),)
    assert s.turns[0].shared_prefix_tokens == 70


def test_claude_code_scale_factors(tmp_path: Path) -> None:
    path = _claude_file(tmp_path)
    half = load_claude_code(path, Scale(length=0.5, time=2.0))
    s1 = half.sessions[0]
    assert s1.block_tokens == 32
    assert [t.input_tokens for t in s1.turns] == [100, 165, 250]
    assert [t.output_tokens for t in s1.turns] == [15, 20, 4]
    assert s1.turns[1].think_time_s == 8.0 and s1.turns[0].shared_prefix_tokens == 80
    stated = half.describe()
    assert stated["length_scale"] == 0.5 and stated["time_scale"] == 2.0
    assert stated["block_tokens"] == 32 and stated["effective_length_scale"] == 0.5
    odd = Scale(length=0.1).describe(64)
    assert odd["block_tokens"] == 6 and odd["effective_length_scale"] == 6 / 64
    with pytest.raises(ValueError, match="positive"):
        Scale(length=0.0)
    assert Scale(length=1 / 64).block_tokens(64) == 1
    with pytest.raises(ValueError, match="finest this trace allows is 1/64"):
        Scale(length=1 / 128).block_tokens(64)  # once silently read as 1/64


def _mooncake_file(tmp_path: Path) -> Path:
    reqs = [
        {"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [0, 1, 2]},
        {"timestamp": 1000, "input_length": 2048, "output_length": 5, "hash_ids": [0, 1, 3, 4]},
        {"timestamp": 1500, "input_length": 700, "output_length": 5, "hash_ids": [0, 5]},
        {
            "timestamp": 4000,
            "input_length": 2600,
            "output_length": 9,
            "hash_ids": [0, 1, 3, 4, 6, 7],
        },
        {"timestamp": 5000, "input_length": 1200, "output_length": 3, "hash_ids": [0, 1, 8]},
    ]
    path = tmp_path / "mc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    return path


def test_mooncake_continuations(tmp_path: Path) -> None:
    trace = load_mooncake(_mooncake_file(tmp_path))
    ids = {s.id: s for s in trace.sessions}
    # 1 extends the full blocks [0, 1] of 0; 3 extends all of 1; 4 extends 0 again,
    # which was already continued, so it starts its own session; 2 shares only block 0.
    assert sorted(ids) == ["mooncake-0", "mooncake-2", "mooncake-4"]
    chain = ids["mooncake-0"]
    assert len(chain.turns) == 3
    assert [t.think_time_s for t in chain.turns] == [0.0, 1.0, 3.0]
    assert [t.offset_s for t in chain.turns] == [0.0, 1.0, 4.0]
    assert chain.turns[2].block_runs == ((0, 2), (3, 2), (6, 2))
    assert ids["mooncake-4"].trace_start_s == 5.0
    assert all(t.shared_prefix_tokens == 0 for s in trace.sessions for t in s.turns)
    assert all(s.prefix_blocks == () for s in trace.sessions)


def test_mooncake_scaled_lengths(tmp_path: Path) -> None:
    trace = load_mooncake(_mooncake_file(tmp_path), Scale(length=0.25, time=0.5))
    first = trace.sessions[0].turns
    assert trace.sessions[0].block_tokens == 128
    assert first[0].input_tokens == 2 * 128 + round(476 * 0.25)
    assert first[1].think_time_s == 0.5


def test_load_trace_detects_format(tmp_path: Path) -> None:
    assert load_trace(_claude_file(tmp_path)).name == "claude_code"
    assert load_trace(_mooncake_file(tmp_path)).name == "mooncake"
    bad = tmp_path / "other.jsonl"
    bad.write_text('{"foo": 1}\n')
    with pytest.raises(ValueError, match="neither"):
        load_trace(bad)


def test_runs_of() -> None:
    assert runs_of([5, 6, 7, 2, 9, 10]) == ((5, 3), (2, 1), (9, 2))
    assert runs_of([]) == ()


def test_real_claude_code_head() -> None:
    trace = load_claude_code(DEFAULT_TRACE, limit=5)
    tops = [s for s in trace.sessions if s.parent_id is None]
    assert len(tops) == 5
    for s in tops:
        for t in s.turns:
            assert t.num_blocks * 64 <= t.input_tokens < t.num_blocks * 64 + 64
            assert t.stop_reason in ("tool_use", "end_turn", "")
        assert [b.kind for b in s.prefix_blocks] == [SYSTEM, TOOLS]
        assert s.turns[0].shared_prefix_tokens == sum(b.tokens for b in s.prefix_blocks)


def test_real_mooncake_about_a_third_continue() -> None:
    trace = load_mooncake(MOONCAKE_TRACE)
    requests = sum(len(s.turns) for s in trace.sessions)
    continued = requests - len(trace.sessions)
    assert requests == 12031
    assert 0.25 < continued / requests < 0.4
