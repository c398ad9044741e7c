"""`penelope bench faults --short` for cases 1, 2, 5 and 6 (store unreachable, slow, corrupt;
clients that misbehave): each holds against the no-fault run (no 5xx, nothing lost or hung,
identical answers, the queue under its cap, RSS within 10 %, writes resumed within 10 s)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.faults.bench import run_bench
from bench.faults.cases import SHORT_CASES
from bench.faults.config import FaultsConfig, short

PORT_BASE = 18340  # this worktree's range, apart from the bench's default


@pytest.fixture(scope="module")
def result() -> dict:
    cfg = dataclasses.replace(short(FaultsConfig()), port_base=PORT_BASE)
    return run_bench(cfg, (*SHORT_CASES, "clients"))


@pytest.mark.parametrize("case", SHORT_CASES)
def test_a_store_fault_under_load_loses_nothing(result: dict, case: str) -> None:
    (summary,) = [c for c in result["cases"] if c["case"] == case]
    assert summary["checks"] == {k: True for k in summary["checks"]}, summary
    assert summary["ttft"]["during"]["n"] > 0  # the load ran through the fault


def test_the_faults_were_felt(result: dict) -> None:
    by = {c["case"]: c for c in result["cases"]}
    assert by["store_unreachable"]["degraded_seen"]  # /ready said so, /health stayed up
    assert by["store_slow"]["read_timeouts"] > 0 or by["store_slow"]["degraded_seen"]
    assert by["segment_corrupt"]["notes"]["segments_damaged"] >= 1
    assert not by["baseline"]["degraded_seen"]


def test_misbehaving_clients_are_answered_and_lose_nothing(result: dict) -> None:
    """Idle sockets, a byte-a-second body, unread streams, the window's edge, a 10x burst:
    each answered as documented, the fault over before the load ends, the sessions intact."""
    (summary,) = [c for c in result["cases"] if c["case"] == "clients"]
    checks = {k: v for k, v in summary["checks"].items() if k != "rss_within_10pct"}
    assert checks == {k: True for k in checks}, summary
    notes = summary["notes"]["clients"]
    assert notes["failures"] == 0 and notes["window_edge_status"] == [200, 400, 400], notes
    assert set(notes["burst"]) <= {"200", "429"} and notes["burst"].get("429", 0) > 0, notes
    assert summary["ttft"]["after"]["n"] > 0  # the load ran on after the fault
