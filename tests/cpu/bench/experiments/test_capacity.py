"""`bench capacity`: the search finds the largest count within the SLO; the bench runs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from bench.experiments import capacity
from bench.experiments.capacity_search import SearchSpec, search


def p90_growing(limit: int):
    """p90 TTFT that crosses 1.0 s just past `limit` sessions; records what ran."""
    ran: list[int] = []

    def measure(n: int) -> dict[str, float]:
        ran.append(n)
        return {"p90_ttft_s": 0.5 if n <= limit else 1.5, "mean_ttft_s": 0.1}

    return measure, ran


@pytest.mark.parametrize("limit", [0, 5, 32, 45, 100, 333])
def test_search_finds_the_last_count_within_the_slo(limit: int) -> None:
    measure, ran = p90_growing(limit)
    r = search(measure, SearchSpec(1.0, start=32, max_sessions=400, resolution=1))
    assert r.sessions_at_slo == limit and not r.capped
    assert len(ran) == len(set(ran))  # no count runs twice
    assert set(r.curve) == set(ran)


def test_search_stops_at_the_cap_and_says_so() -> None:
    measure, _ = p90_growing(10_000)
    r = search(measure, SearchSpec(1.0, start=32, max_sessions=100, resolution=4))
    assert (r.sessions_at_slo, r.capped) == (100, True)


def test_resolution_bounds_the_bracket() -> None:
    measure, ran = p90_growing(45)
    r = search(measure, SearchSpec(1.0, start=32, max_sessions=400, resolution=8))
    assert 45 - 8 < r.sessions_at_slo <= 45 and len(ran) <= 5


def test_the_crossing_interpolates_inside_the_bracket() -> None:
    from bench.experiments.capacity_search import crossing

    # met at 128 (1.0 s), missed at 160 (4.0 s): on a log axis 2.0 s is halfway
    assert crossing({64: 0.5, 128: 1.0, 160: 4.0, 256: 90.0}, 2.0) == pytest.approx(144.0)
    assert crossing({64: 0.5, 128: 1.0}, 2.0) == 128.0  # nothing above ran: the last met
    assert crossing({64: 5.0}, 2.0) == 0.0  # even the first count missed
    # a non-monotonic seed: the last count that met the SLO and the next miss above it
    expected = 128 + 32 * math.log(2.0 / 1.5) / math.log(4.0 / 1.5)
    assert crossing({64: 0.5, 96: 2.5, 128: 1.5, 160: 4.0}, 2.0) == pytest.approx(expected)


@pytest.mark.slow
def test_capacity_bench_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "cap.json"
    argv = ["--lengths", "quarter", "--setups", "penelope,sglang-hicache/pow2", "--seeds", "1"]
    argv += ["--start", "2", "--max-sessions", "4", "--resolution", "1", "--slo-s", "30"]
    argv += ["--replicas", "2", "--json", str(out)]
    assert capacity.main(argv) == 0
    doc = json.loads(out.read_text())
    runs = {r["name"]: r for r in doc["runs"]}
    assert set(runs) == {"penelope", "sglang-hicache/pow2"}
    for r in runs.values():
        assert 0 <= r["sessions_at_slo"] <= 4 and r["curve"]
        for fig in r["curve"].values():
            assert fig["p90_ttft_s"] > 0 and 0 <= fig["hit_ratio"] <= 1
    assert doc["best_peer"]["setup"] == "sglang-hicache/pow2"
    att = doc["attribution"]["rows"]
    assert "penelope cache / pow2" in att and "sglang-hicache / affinity" in att
    assert att["sglang-hicache/pow2"]["mean_ttft_s_vs_best"]["mean"] == pytest.approx(1.0)
    assert "crossing" in runs["penelope"] and len(runs["penelope"]["per_seed"]["crossing"]) == 1


@pytest.mark.slow
def test_attribution_alone_at_a_given_count(tmp_path: Path) -> None:
    out = tmp_path / "att.json"
    argv = ["--lengths", "quarter", "--setups", "sglang-hicache/pow2", "--seeds", "1"]
    argv += ["--attribution-at", "3", "--replicas", "2", "--json", str(out)]
    assert capacity.main(argv) == 0
    att = json.loads(out.read_text())["attribution"]
    assert att["sessions"] == 3 and att["best_peer"] == "sglang-hicache/pow2"
    assert {"penelope", "penelope - chunk cap", "penelope cache / pow2"} <= set(att["rows"])
    with pytest.raises(SystemExit):  # no peer to attribute against
        capacity.main(["--setups", "penelope", "--attribution-at", "3"])


@pytest.mark.slow
def test_attribution_runs_only_the_rows_asked_and_the_best_peers(tmp_path: Path) -> None:
    out = tmp_path / "att.json"
    argv = ["--lengths", "quarter", "--setups", "sglang-hicache/pow2", "--seeds", "1"]
    argv += ["--attribution-at", "3", "--replicas", "2", "--json", str(out)]
    assert capacity.main([*argv, "--rows", "penelope,penelope cache / pow2"]) == 0
    rows = json.loads(out.read_text())["attribution"]["rows"]
    assert set(rows) == {"penelope", "penelope cache / pow2", "sglang-hicache/pow2"}
    with pytest.raises(SystemExit, match="unknown attribution rows"):
        capacity.main([*argv, "--rows", "penelope - nothing"])


@pytest.mark.slow
def test_points_runs_every_setup_at_every_count_and_seed(tmp_path: Path) -> None:
    out = tmp_path / "pts.json"
    names = "penelope,penelope (policy greedydual),penelope cache / pow2"
    argv = ["--lengths", "quarter", "--setups", names, "--seeds", "2", "--replicas", "2"]
    plot = tmp_path / "pts.png"
    assert capacity.main([*argv, "--points", "2,3", "--json", str(out), "--plot", str(plot)]) == 0
    assert plot.stat().st_size > 0  # the curves, as a search's
    full = json.loads(out.read_text())
    doc = full["points"]
    assert set(full["crossings"]) == set(doc) == set(names.split(","))
    for per_count in doc.values():
        assert set(per_count) == {"2", "3"}
        for row in per_count.values():
            assert set(row["per_seed"]) == {"0", "1"}
            p90s = [f["p90_ttft_s"] for f in row["per_seed"].values()]
            assert row["p90_ttft_s"] == pytest.approx(sum(p90s) / 2)


def test_point_crossings_interpolate_each_seeds_curve() -> None:
    from bench.experiments.capacity_report import point_crossings

    def row(*p90s: float) -> dict:
        return {"per_seed": {str(i): {"p90_ttft_s": v} for i, v in enumerate(p90s)}}

    doc = {"x": {"100": row(1.0, 3.0), "200": row(4.0, 5.0)}}
    got = point_crossings(doc, 2.0)["x"]
    assert got["0"] == pytest.approx(150.0)  # log-linear: 2 is halfway from 1 to 4
    assert got["1"] == 0.0  # above the SLO at every count


def test_free_copies_change_only_the_copy_times() -> None:
    from bench.experiments.peers import sim_config
    from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel
    from bench.sim.setups import setups
    from bench.sim.tiers import FreeCopies
    from penelope_engine.cache.tier import Tier

    base, free = setups(["penelope", "penelope (free copies)"])
    a, b = (sim_config(s, 1024, 1.0, 2) for s in (base, free))
    assert b.free_copies and dataclasses.replace(b, free_copies=False) == a
    cost = GpuCostModel(QWEN3["qwen3-8b"], HARDWARE["h200"])
    f = FreeCopies(cost)
    assert f.load_time(4096, Tier.STORE) == f.offload_time(4096) == f.load_s(64, Tier.HOST) == 0.0
    assert f.token_cost(1000) == cost.token_cost(1000) and f.num_layers == cost.num_layers


def test_unbounded_kv_multiplies_both_tiers_and_nothing_else() -> None:
    from bench.experiments.peers import sim_config
    from bench.sim.setups import UNBOUNDED_KV_SCALE, CacheSpec, setups

    base, ceiling = setups(["penelope", "penelope (unbounded KV)"])
    a, b = (sim_config(s, 1024, 1.5, 2) for s in (base, ceiling))
    assert b.device_budget_tokens == UNBOUNDED_KV_SCALE * a.device_budget_tokens
    assert b.host_budget_tokens == UNBOUNDED_KV_SCALE * a.host_budget_tokens
    assert dataclasses.replace(b, device_budget_tokens=1024, host_budget_tokens=1536) == a
    (peer,) = setups(["continuum/llm_d +long_prefill_2048 (unbounded KV)"])
    assert peer.tuned and peer.spec.kv_scale == UNBOUNDED_KV_SCALE
    with pytest.raises(ValueError, match="kv_scale"):
        CacheSpec("lru", "gpu", kv_scale=0)
