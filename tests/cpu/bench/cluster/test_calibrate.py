"""The autoscaling ramp's slots follow the measured service time and the trace's schedule."""

from __future__ import annotations

import pytest

from bench.cluster.autoscale import load_config
from bench.cluster.calibrate import MAX_SLOTS, expected_ongoing, slots_for
from bench.cluster.config import ClusterConfig
from bench.load.client import slot_sessions
from bench.sessions import Session, Turn


def _session(sid: str, thinks: list[float]) -> Session:
    turns = tuple(Turn(t, 0.0, ((0, 1),), 16, 4, "tool_use", 0) for t in thinks)
    return Session(sid, turns, 16, "session")


def test_expected_ongoing_is_each_slots_busy_share_of_the_load_phase() -> None:
    load = load_config(2, ramp_s=10.0, load_s=20.0, trace=ClusterConfig().trace)
    # slot 0 starts at 0 s, slot 1 at 5 s; every turn waits 1 s, then takes 1 s
    slots = [[_session("a", [1.0] * 100)], [_session("b", [1.0] * 100)]]
    # over 10 .. 30 s each slot is busy half the time: one request in flight
    assert expected_ongoing(slots, 1.0, load) == pytest.approx(1.0)
    # a slot whose sessions end early adds only what it served in the phase: slot b's
    # three turns run at 6, 8 and 10 s, one second of it inside 10 .. 30 s
    short = [[_session("a", [1.0] * 100)], [_session("b", [1.0] * 3)]]
    assert expected_ongoing(short, 1.0, load) == pytest.approx(0.5 + 1 / 20)
    # a tool call past the end stops the slot, as the client's does
    assert expected_ongoing([[_session("c", [40.0, 1.0])]], 1.0, load) == 0.0


def test_a_faster_machine_gets_more_slots_and_each_reaches_the_wanted_load() -> None:
    load = load_config(1, ramp_s=20.0, load_s=40.0, trace=ClusterConfig().trace)
    slow_n, slow_ongoing = slots_for(load, 0.5, 4.0)
    fast_n, fast_ongoing = slots_for(load, 0.2, 4.0)
    assert 2 <= slow_n < fast_n <= MAX_SLOTS
    assert slow_ongoing >= 4.0 and fast_ongoing >= 4.0
    # the fewest that reach it: one slot less falls short
    from bench.traces import load_claude_code

    sessions = load_claude_code(load.trace, load.trace_scale).sessions
    assert expected_ongoing(slot_sessions(sessions, fast_n - 1), 0.2, load) < 4.0
    with pytest.raises(ValueError, match="service_s"):
        slots_for(load, 0.0, 4.0)
