"""`penelope bench faults --short` for cases 1, 2 and 5 (store unreachable, slow, corrupt):
each holds against the no-fault run (no 5xx, nothing lost or hung, identical answers,
the queue under its cap, RSS within 10 %, writes resumed within 10 s)."""

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
    return run_bench(cfg, SHORT_CASES)


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
