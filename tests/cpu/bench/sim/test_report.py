"""Report rows in the issue's schema, per-seed ratios, the table, the plots, the CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bench.sim.metrics import RunMetrics
from bench.sim.report import plot, ratios, row, table, write_json
from bench.sim.simulate import main as simulate_main

SCHEMA = {
    "policy",
    "tiers",
    "router",
    "replicas",
    "device_budget_tokens",
    "seeds",
    "mean_ttft_s",
    "mean_ttft_s_spread",
    "p90_ttft_s",
    "mean_jct_s",
    "mean_llm_time_s",
    "hit_ratio",
    "partial_return_ratio",
    "recompute_ratio",
}


def _metrics(ttft: float, jct: float) -> RunMetrics:
    return RunMetrics(
        mean_ttft_s=ttft,
        p90_ttft_s=2 * ttft,
        mean_jct_s=jct,
        mean_llm_time_s=jct / 2,
        mean_queue_s=ttft / 2,
        hit_ratio=0.5,
        partial_return_ratio=0.1,
        recompute_ratio=0.2,
        requests=10,
        sessions=2,
        failed_requests=0,
        prompt_tokens=1000,
        recomputed_tokens=200,
        sim_time_s=100.0,
        wall_time_s=1.0,
        ttfts=(ttft, ttft),
    )


def _setup(policy: str, tiers: str = "gpu") -> dict:
    return {
        "policy": policy,
        "tiers": tiers,
        "router": "pow2",
        "replicas": 1,
        "device_budget_tokens": 1000,
    }


def test_row_has_the_issue_schema_and_seed_spread() -> None:
    r = row(_setup("lru"), [_metrics(1.0, 10.0), _metrics(3.0, 30.0)])
    assert SCHEMA <= set(r)
    assert r["mean_ttft_s"] == 2.0 and r["mean_ttft_s_spread"] == [1.0, 3.0]
    assert r["seeds"] == 2 and r["per_seed"]["mean_jct_s"] == [10.0, 30.0]
    with pytest.raises(ValueError, match="no runs"):
        row(_setup("lru"), [])


def test_ratios_are_taken_seed_by_seed_against_the_baseline() -> None:
    base = row(_setup("lru"), [_metrics(1.0, 10.0), _metrics(4.0, 40.0)])
    better = row(_setup("oracle"), [_metrics(0.5, 10.0), _metrics(1.0, 20.0)])
    (rel,) = ratios([base, better])
    assert rel["policy"] == "oracle"
    assert rel["mean_ttft_s_ratio"] == pytest.approx((0.5 + 0.25) / 2)
    assert rel["mean_ttft_s_ratio_spread"] == [0.25, 0.5]
    assert rel["mean_jct_s_ratio_spread"] == [0.5, 1.0]
    text = table([base, better])
    assert "oracle" in text and "0.38 [0.25-0.50]" in text


def test_json_and_plots(tmp_path: Path) -> None:
    rows = [row(_setup("lru"), [_metrics(1.0, 10.0)]), row(_setup("oracle"), [_metrics(0.5, 9.0)])]
    write_json(tmp_path / "out.json", {"length_scale": 1.0, "time_scale": 1.0}, rows)
    doc = json.loads((tmp_path / "out.json").read_text())
    assert set(doc) == {"config", "runs", "ratios_to_baseline"} and len(doc["runs"]) == 2
    paths = plot(tmp_path / "plots", rows, [(_setup("lru"), [0.1, 0.2, 0.4])])
    assert [p.name for p in paths] == ["ttft_cdf.png", "ttft_vs_budget.png", "jct_vs_budget.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def _tiny_trace(path: Path) -> Path:
    with gzip.open(path, "wt") as f:
        for i in range(3):
            reqs = [
                {
                    "t": 5.0 * k,
                    "type": "n",
                    "in": 300 + 200 * k,
                    "out": 8,
                    "api_time": 1.0,
                    "think_time": 0.0 if k == 0 else 2.0,
                    "stop": "tool_use",
                    "hash_runs": [[1, (300 + 200 * k) // 64]],
                }
                for k in range(4)
            ]
            f.write(
                json.dumps(
                    {
                        "id": f"t{i}",
                        "block_size": 64,
                        "tool_tokens": 100,
                        "system_tokens": 28,
                        "requests": reqs,
                    }
                )
                + "\n"
            )
    return path


def test_simulate_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = _tiny_trace(tmp_path / "t.jsonl.gz")
    out = tmp_path / "sim.json"
    code = simulate_main(
        [
            "--trace-file",
            str(trace),
            "--sessions",
            "3",
            "--seeds",
            "2",
            "--policies",
            "lru,oracle",
            "--tiers",
            "gpu,gpu+cpu",
            "--device-budget-tokens",
            "2048",
            "--page-size",
            "16",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert len(doc["runs"]) == 4 and all(r["seeds"] == 2 for r in doc["runs"])
    assert doc["config"]["length_scale"] == 1.0 and doc["config"]["time_scale"] == 1.0
    assert doc["config"]["cost_model"]["model"] == "Qwen3-8B"
    assert "vs baseline" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        simulate_main(["--trace-file", str(trace), "--policies", "fifo"])
