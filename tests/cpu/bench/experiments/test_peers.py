"""`penelope bench peers`: set-ups, JSON schema, best peer and ratios on a small run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.experiments import peers, peers_report
from bench.peers.registry import SIM_ROUTERS
from bench.sim.setups import CACHES, PEER_CACHES, PEER_ROUTERS, STEP_TOKENS, ablations, setups
from penelope_engine.errors import UnknownNameError


def test_every_peer_set_up_is_a_router_times_an_engine_cache() -> None:
    names = {s.name for s in setups(with_ablations=False)}
    assert len(names) == len(PEER_CACHES) * len(PEER_ROUTERS) + 1
    assert all(r in SIM_ROUTERS for r in PEER_ROUTERS)
    assert CACHES["continuum"].agent.admission == "program"
    assert CACHES["continuum"].agent.retention == "ttl"
    assert CACHES["sglang-radix"].tiers == "gpu" and CACHES["sglang-hicache"].tiers == "gpu+cpu"
    full = CACHES["penelope"]
    for ab in ablations():  # each switches exactly one thing off
        diff = [k for k, v in ab.levers.items() if v != setups(["penelope"])[0].levers[k]]
        assert len(diff) + (ab.router != "affinity") == 1, ab.name
    assert full.agent.backfill and full.agent.retention == "return_aware"
    with pytest.raises(UnknownNameError):
        setups(["nope"])


def test_peers_json_names_the_best_peer_and_penelopes_ratio(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    chosen = "sglang-radix/pow2,sglang-hicache/ray_prefix,penelope"
    argv = [
        "--lengths",
        "quarter",
        "--sessions",
        "3",
        "--seeds",
        "2",
        "--replicas",
        "2",
        "--setups",
        chosen,
        "--json",
        str(out),
        "--plot",
        str(tmp_path / "p.png"),
    ]
    assert peers.main(argv) == 0
    d = json.loads(out.read_text())
    runs = {r["name"]: r for r in d["runs"]}
    assert set(runs) == set(chosen.split(","))
    for r in runs.values():
        for k in (
            "system",
            "router",
            "cache",
            "levers",
            "mean_ttft_s",
            "p90_ttft_s",
            "mean_queue_s",
            "mean_llm_time_s",
            "mean_llm_floor_s",
            "mean_ttft_floor_s",
            "mean_jct_s",
            "turns_per_hour_per_replica",
        ):
            assert k in r, k
        assert len(r["per_seed"]["mean_ttft_s"]) == 2
        assert r["mean_llm_time_s"] >= r["mean_llm_floor_s"] * 0.999
        assert 0 < r["mean_ttft_floor_s"] <= r["mean_ttft_s"] * 1.001
    best = d["best_peer"]["mean_ttft_s"]
    peer_ttfts = {n: r["mean_ttft_s"] for n, r in runs.items() if r["system"] != "penelope"}
    assert best["setup"] == min(peer_ttfts, key=peer_ttfts.__getitem__)
    ratio = d["vs_best_peer"]["penelope"]["mean_ttft_s"]
    per_seed = [
        a / b
        for a, b in zip(
            runs["penelope"]["per_seed"]["mean_ttft_s"],
            runs[best["setup"]]["per_seed"]["mean_ttft_s"],
        )
    ]
    assert ratio["mean"] == pytest.approx(sum(per_seed) / 2)
    assert d["config"]["dropped_turns"] == {"0": 0, "1": 0}  # 1/4 length: nothing is cut
    assert (tmp_path / "p.png").stat().st_size > 0
    # the same two seeds run one at a time and merged give the same document
    parts = []
    for seed in (0, 1):
        part = tmp_path / f"s{seed}.json"
        one = [a for a in argv if a not in ("--plot", str(tmp_path / "p.png"))]
        one[one.index("--seeds") + 1] = "1"
        one[one.index("--json") + 1] = str(part)
        assert peers.main([*one, "--seed-base", str(seed)]) == 0
        parts.append(part)
    merged = tmp_path / "merged.json"
    assert peers_report.main([*map(str, parts), "--json", str(merged)]) == 0
    m = json.loads(merged.read_text())
    assert [r["per_seed"] for r in m["runs"]] == [r["per_seed"] for r in d["runs"]]
    assert m["best_peer"] == d["best_peer"] and m["vs_best_peer"] == d["vs_best_peer"]
    assert m["config"]["dropped_turns"] == d["config"]["dropped_turns"]
    # different set-ups over the same seeds, merged side by side: the same document again
    halves = []
    for part_runs in (d["runs"][:2], d["runs"][2:]):
        half = tmp_path / f"half{len(halves)}.json"
        half.write_text(json.dumps(peers_report.document(d["config"], part_runs)))
        halves.append(half)
    assert peers_report.main([*map(str, halves), "--json", str(merged)]) == 0
    m = json.loads(merged.read_text())
    assert [r["per_seed"] for r in m["runs"]] == [r["per_seed"] for r in d["runs"]]
    assert m["best_peer"] == d["best_peer"] and m["vs_best_peer"] == d["vs_best_peer"]
    with pytest.raises(ValueError, match="same seeds"):
        peers_report.main([str(halves[1]), str(parts[0])])
    # set-ups in another order, one file without a metric: aligned by name, metric left out
    shuffled = json.loads(parts[1].read_text())
    shuffled["runs"].reverse()
    for r in shuffled["runs"]:
        del r["per_seed"]["mean_ttft_floor_s"]
    parts[1].write_text(json.dumps(shuffled))
    assert peers_report.main([*map(str, parts), "--json", str(merged)]) == 0
    m = json.loads(merged.read_text())
    assert [r["per_seed"]["mean_ttft_s"] for r in m["runs"]] == [
        r["per_seed"]["mean_ttft_s"] for r in d["runs"]
    ]
    assert all("mean_ttft_floor_s" not in r["per_seed"] for r in m["runs"])
    # --only keeps some set-ups of each file, and then the seeds merge again
    assert peers_report.main([*map(str, parts), "--only", "penelope", "--json", str(merged)]) == 0
    m = json.loads(merged.read_text())
    assert [r["name"] for r in m["runs"]] == ["penelope"]
    renamed = ["--only", "penelope", "--rename", "penelope=penelope - chunk cap"]
    assert peers_report.main([*map(str, parts), *renamed, "--json", str(merged)]) == 0
    assert [r["name"] for r in json.loads(merged.read_text())["runs"]] == ["penelope - chunk cap"]
    assert m["runs"][0]["per_seed"]["mean_ttft_s"] == runs["penelope"]["per_seed"]["mean_ttft_s"]


def test_true_lengths_end_sessions_at_the_window() -> None:
    args = peers.build_parser().parse_args(
        ["--lengths", "true", "--sessions", "6", "--seeds", "1", "--window-tokens", "60000"]
    )
    wls, dropped = peers.workloads(args)
    turns = [t for s in wls[0].all_sessions for t in s.turns]
    assert dropped[0] > 0 and turns
    assert all(t.input_tokens + t.output_tokens <= 60000 for t in turns)


def test_tuned_peers_are_a_separate_bar_and_only_where_asked() -> None:
    tuned = [s for s in setups(tuned=True, with_ablations=False) if s.tuned]
    assert len(tuned) == len(PEER_CACHES) * len(PEER_ROUTERS)
    chunk = CACHES["penelope"].prefill_chunk
    assert {s.spec.prefill_chunk for s in tuned} == {chunk}
    for s in tuned:  # each with its own engine's setting, named so
        if s.cache.startswith("sglang"):  # --chunked-prefill-size: the whole step's budget
            assert s.name.endswith(f" +chunked_prefill_{chunk}") and s.spec.step_tokens == chunk
        else:  # vLLM's --long-prefill-token-threshold: one request's cap
            assert s.name.endswith(f" +long_prefill_{chunk}") and s.spec.step_tokens == STEP_TOKENS
        cfg = peers.sim_config(s, 100_000, 2.0, 1).scheduler
        assert (cfg.max_batch_tokens, cfg.prefill_chunk) == (s.spec.step_tokens, chunk)
    assert CACHES["penelope"].step_tokens == STEP_TOKENS
    assert not any(s.tuned for s in setups())
    assert setups([tuned[0].name]) == [tuned[0]]

    def run(name: str, system: str, ttft: list[float], is_tuned: bool = False) -> dict:
        about = {"name": name, "system": system, "router": "r", "cache": "c", "levers": {}}
        per_seed = [
            {k: t for k in peers_report.LOWER + peers_report.HIGHER} | {"mean_ttft_s": t}
            for t in ttft
        ]
        return peers_report.summarize({**about, "tuned": is_tuned}, per_seed)

    runs = [
        run("peer", "hicache", [2.0, 4.0]),
        run("peer +chunk", "hicache", [1.0, 1.0], is_tuned=True),
        run("penelope", "penelope", [1.0, 2.0]),
    ]
    doc = peers_report.document({}, runs)
    assert doc["best_peer"]["mean_ttft_s"]["setup"] == "peer"
    assert doc["vs_best_peer"]["penelope"]["mean_ttft_s"]["mean"] == pytest.approx(0.5)
    assert doc["best_tuned_peer"]["mean_ttft_s"]["setup"] == "peer +chunk"
    assert doc["vs_best_tuned_peer"]["penelope"]["mean_ttft_s"]["max"] == pytest.approx(2.0)
    assert "best_tuned_peer" not in peers_report.document({}, [runs[0], runs[2]])
