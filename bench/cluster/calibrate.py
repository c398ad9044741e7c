"""The autoscaling ramp's load, calibrated to the machine: how many session slots.

A fixed slot count tests scaling on one CPU only: on a faster one the same slots
leave the replica idle between tool calls and nothing scales (issue 51 saw no
signal at all on a Xeon that the AMD EPYC's 6 slots scaled). So the ramp's
slots are derived from two things:

- the **service time** of one request on the one replica the ramp starts from,
  measured: `bench.load`'s client with one slot replays the ramp's own requests
  back to back (no tool time) for `PROBE_S`, and the mean latency of its answers
  is the time a request holds the replica;
- the **trace's own schedule**: each slot replays its sessions (`slot_sessions`,
  as the client will), sleeping each turn's tool time, serving each request in
  the measured time; the expected ongoing requests over the load phase are the
  slots' busy time in it divided by its length.

The ramp gets the fewest slots whose expected ongoing requests reach
`ongoing_wanted` (2 x target x the most replicas: the policy then wants every
replica the fleet may have, twice over). Queueing only adds to the real count,
so the ramp is at least that heavy on any CPU.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

from bench.child import run_child
from bench.load.client import client_deadline_s, client_main, slot_sessions
from bench.load.config import LoadConfig
from bench.sessions import Session
from bench.traces import load_claude_code

PROBE_S = 10.0  # how long the one-slot probe replays requests back to back
PROBE_TIME_SCALE = 1e-6  # the probe's tool times: none to speak of
MIN_PROBE_ANSWERS = 5
MAX_SLOTS = 64  # the client opens two connections a slot


def expected_ongoing(slots: list[list[Session]], service_s: float, load: LoadConfig) -> float:
    """Mean requests in flight over the load phase (`ramp_s` .. `ramp_s + duration`), when
    every slot follows its sessions' schedule and each request takes `service_s`."""
    end = load.duration_s
    phase = (load.ramp_s, end)
    busy = 0.0
    for i, sessions in enumerate(slots):
        t = i * load.ramp_s / len(slots)
        for turn in (turn for session in sessions for turn in session.turns):
            t += turn.think_time_s
            if t >= end:
                break
            busy += max(0.0, min(t + service_s, phase[1]) - max(t, phase[0]))
            t += service_s
    return busy / max(phase[1] - phase[0], 1e-9)


def slots_for(load: LoadConfig, service_s: float, ongoing_wanted: float) -> tuple[int, float]:
    """The fewest slots (2 .. MAX_SLOTS) whose expected ongoing requests reach
    `ongoing_wanted`, and what they are expected to reach (MAX_SLOTS' if none does)."""
    if service_s <= 0:
        raise ValueError(f"service_s must be positive, got {service_s}")
    sessions = load_claude_code(load.trace, load.trace_scale).sessions
    ongoing = 0.0
    for n in range(2, MAX_SLOTS + 1):
        ongoing = expected_ongoing(slot_sessions(sessions, n), service_s, load)
        if ongoing >= ongoing_wanted:
            return n, ongoing
    return MAX_SLOTS, ongoing


def service_time(url: str, load: LoadConfig, vocab: int) -> tuple[float, int]:
    """Mean seconds one request of the ramp's holds the replica, measured by one slot
    replaying them back to back for PROBE_S; and how many answers it averaged."""
    from bench.load.client import summarize

    probe = dataclasses.replace(
        load, sessions=1, duration_s=PROBE_S, ramp_s=0.0, time_scale=PROBE_TIME_SCALE,
        stream_share=0.0, cancel_share=0.0, malformed_share=0.0,
    )  # fmt: skip
    records = run_child(
        client_main, (probe, url, vocab), timeout_s=client_deadline_s(probe), name="probe-client"
    )
    answered = [s for kind, status, s in records if kind == "plain" and status == "200"]
    if len(answered) < MIN_PROBE_ANSWERS:
        raise RuntimeError(
            f"the service-rate probe got {len(answered)} answers in {PROBE_S:g} s "
            f"(at least {MIN_PROBE_ANSWERS} needed): {summarize(records)['by_status']}"
        )
    return statistics.fmean(answered), len(answered)


def calibrate(url: str, load: LoadConfig, vocab: int, ongoing_wanted: float) -> dict[str, Any]:
    """The probe, then the slots: the `calibration` entry (`slots` is the ramp's)."""
    service_s, answers = service_time(url, load, vocab)
    slots, ongoing = slots_for(load, service_s, ongoing_wanted)
    return {
        "service_s": round(service_s, 4),
        "probe_answers": answers,
        "ongoing_wanted": ongoing_wanted,
        "slots": slots,
        "expected_ongoing": round(ongoing, 2),
        "reached": ongoing >= ongoing_wanted or math.isclose(ongoing, ongoing_wanted),
    }
