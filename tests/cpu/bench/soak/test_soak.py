"""`penelope bench soak`, run small: real server, real client process; the slope verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.soak.config import SoakConfig
from bench.soak.server import SERIES, fit, run_soak, slopes
from penelope_cli.cli import main
from penelope_engine.shipped import SHIPPED_CPU_AGENT, SHIPPED_POLICY

SMALL = ["--concurrency", "4", "--sample-period-s", "0.2", "--session-ttl-s", "0.5"]
SMALL += ["--store-record-ttl-s", "1.0", "--device-pages", "128", "--host-pages", "128"]


def test_a_short_run_expires_records_and_reports_every_series(tmp_path: Path) -> None:
    out, png = tmp_path / "soak.json", tmp_path / "soak.png"
    argv = ["bench", "soak", "--requests", "600", *SMALL, "--json", str(out), "--plot", str(png)]
    code = main(argv)
    r = json.loads(out.read_text())
    assert code == (0 if r["ok"] else 1)  # too short to be flat after warm-up: not asserted
    q = r["requests"]
    assert q["by_status"] == {"200": 600} and q["transport_errors"] == 0
    assert q["sessionless"] + q["session_requests"] == 600 and not q["deadline_hit"]
    assert r["integrity"] == "ok" and r["end_state"]["engine_idle"]
    assert r["end_state"]["request_pages"] == r["end_state"]["locked_nodes"] == 0
    end = r["samples"][-1]
    assert end["requests"] == 600
    assert end["session_records"] < q["sessions"] / 2  # idle sessions' records expired
    assert end["handover_sessions"] <= end["session_records"]
    assert set(r["slopes"]) == set(SERIES)
    assert all(set(SERIES) <= set(s) for s in r["samples"]) and len(r["samples"]) > 5
    assert r["cpu"]["model"] and png.stat().st_size > 0
    assert r["engine"]["policy"] == SHIPPED_POLICY and r["engine"]["store"]  # what ships
    assert r["engine"]["agent"]["admission"] == SHIPPED_CPU_AGENT.admission  # a CPU server


def test_sessionless_requests_leave_no_session_record() -> None:
    cfg = SoakConfig(
        requests=200, concurrency=4, sessionless_share=1.0, sample_period_s=0.2, device_pages=128
    )
    r = run_soak(cfg)
    end = r["samples"][-1]
    assert r["requests"]["by_status"] == {"200": 200} and r["requests"]["sessions"] == 0
    assert end["session_records"] == end["handover_sessions"] == end["retention_gaps"] == 0
    assert end["path_records"] == 0 and r["integrity"] == "ok"


def samples(values: list[float], name: str = "tree_nodes") -> list[dict[str, Any]]:
    return [{"requests": 1000 * i, name: v} for i, v in enumerate(values)]


def test_a_flat_series_is_flat_and_a_growing_one_is_not() -> None:
    wobble = [100 + (i % 3) for i in range(40)]  # noise around a level: flat
    assert fit(samples(wobble), "tree_nodes", 10_000)["flat"]
    growing = [100 + 2 * i for i in range(40)]  # +20 per 10K requests: 60 over 30K
    f = fit(samples(growing), "tree_nodes", 10_000)
    assert not f["flat"] and f["slope_per_10k"] == pytest.approx(20.0)
    assert f["level_at_warmup"] == 120 and f["level_end"] == 178
    small = [0, 0, 0, 1, 1, 1, 1, 1]  # a drift of 1 is within the floor of 2
    assert fit(samples(small), "tree_nodes", 0)["flat"]
    sawtooth = [90 + (i % 8) * 5 for i in range(64)]  # swept every 8 samples: no drift
    assert fit(samples(sawtooth, "session_records"), "session_records", 0)["flat"]


def test_memory_is_flat_within_five_percent_of_its_warmup_level() -> None:
    assert fit(samples([500, 1000, 1040], "rss_mib"), "rss_mib", 1000)["flat"]
    assert not fit(samples([500, 1000, 1060], "rss_mib"), "rss_mib", 1000)["flat"]


def test_a_run_that_never_ends_warmup_is_not_flat_and_missing_series_are_left_out() -> None:
    assert not fit(samples([1, 1, 1]), "tree_nodes", 10**6)["flat"]
    rows = [{**s, "handover_sessions": None} for s in samples([5, 5, 5])]
    fits = slopes([{**s, **{n: s.get(n, 0) for n in SERIES}} for s in rows], 0)
    assert "handover_sessions" not in fits and fits["tree_nodes"]["flat"]


@pytest.mark.parametrize(
    "bad",
    [
        {"requests": 0},
        {"sessionless_share": 1.5},
        {"prefix_share": -0.1},
        {"warmup_share": 1.0},
        {"max_turns": 1},
        {"prompt_tokens": 300},
        {"prefix_tokens": 48},
        {"session_ttl_s": 0},
        {"host_pages": -1},
    ],
)
def test_bad_settings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be|need"):
        SoakConfig(**bad)
