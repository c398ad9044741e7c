"""The ablation table: per-seed lever ratios from simulate JSON files."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.experiments.ablation import best_policy, floor_line, lever_rows, main, ratio, report
from bench.sim.metrics import RunMetrics
from bench.sim.report import load_rows, row, write_json


def _m(ttft: float) -> RunMetrics:
    return RunMetrics(
        ttft, 2 * ttft, 100 + ttft, ttft, 0.0, 0.5, 0.1, 0.2, 10, 2, 0, 1000, 200, 1.0, 1.0
    )


def _row(policy: str, tiers: str, router: str, ttfts: list[float]) -> dict:
    host = 4000 if tiers == "gpu+cpu" else 0
    setup = {"policy": policy, "tiers": tiers, "router": router, "replicas": 4}
    setup |= {"device_budget_tokens": 1000, "host_budget_tokens": host}
    return row(setup, [_m(t) for t in ttfts])


ROWS = [
    _row("lru", "gpu", "pow2", [10.0, 20.0]),
    _row("return_aware", "gpu", "pow2", [8.0, 18.0]),
    _row("lru", "gpu+cpu", "pow2", [5.0, 10.0]),
    _row("lru", "gpu", "affinity", [6.0, 8.0]),
    _row("lru", "gpu+cpu", "affinity", [3.0, 4.0]),
    _row("return_aware", "gpu+cpu", "affinity", [2.0, 2.0]),
    _row("oracle", "gpu+cpu", "affinity", [1.0, 1.0]),
    _row("return_aware", "gpu", "affinity", [4.0, 6.0]),
    _row("return_aware", "gpu+cpu", "pow2", [4.0, 8.0]),
]


def test_ratios_are_taken_seed_by_seed() -> None:
    base, full = ROWS[0], ROWS[5]
    assert ratio(full, base, "mean_ttft_s") == pytest.approx((0.15, 0.1, 0.2))
    assert ratio(base, base, "mean_llm_time_s") == (1.0, 1.0, 1.0)


def test_best_policy_never_picks_the_oracle_and_levers_pair_up() -> None:
    _, by, best = report(ROWS)
    assert best == best_policy(by, "gpu+cpu", "affinity") == "return_aware"
    levers = {name: (a, b) for name, a, b in lever_rows(by, best)}
    assert levers["full system"] == (
        ("return_aware", "gpu+cpu", "affinity"),
        ("lru", "gpu", "pow2"),
    )
    assert levers["host tier alone"] == (("lru", "gpu+cpu", "pow2"), ("lru", "gpu", "pow2"))
    assert levers["affinity router last"][1] == ("return_aware", "gpu+cpu", "pow2")
    assert levers["policy oracle last"][1] == ("lru", "gpu+cpu", "affinity")
    assert "policy oracle alone" not in levers  # no oracle/gpu/pow2 run


def test_cli_merges_files_and_refuses_other_seeds(tmp_path: Path, capsys) -> None:
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    write_json(a, {"seeds": [0, 1], "sessions": 2}, ROWS[:4])
    write_json(b, {"seeds": [0, 1], "sessions": 2}, ROWS[4:])
    md, png = tmp_path / "t.md", tmp_path / "t.png"
    assert main([str(a), str(b), "--markdown", str(md), "--plot", str(png)]) == 0
    text = md.read_text()
    assert "| full system | return_aware/gpu+cpu/affinity | lru/gpu/pow2 | 0.15 [0.10-0.20]" in text
    assert png.stat().st_size > 1000 and "full system" in capsys.readouterr().out
    assert json.loads(a.read_text())["runs"][0]["seeds"] == 2
    write_json(c, {"seeds": [2, 3], "sessions": 2}, ROWS[:1])  # more seeds of the baseline
    rows, _ = load_rows([a, b, c])
    (base,) = [
        r for r in rows if r["policy"] == "lru" and r["tiers"] == "gpu" and r["router"] == "pow2"
    ]
    assert base["seed_list"] == [0, 1, 2, 3] and base["per_seed"]["mean_ttft_s"] == [10, 20, 10, 20]
    assert base["mean_ttft_s"] == 15 and base["seeds"] == 4
    with pytest.raises(ValueError, match="different seeds"):
        report(rows)
    with pytest.raises(ValueError, match="twice"):
        load_rows([a, a])
    write_json(c, {"seeds": [2, 3], "sessions": 3}, ROWS[:1])
    with pytest.raises(ValueError, match="sessions differs"):
        load_rows([a, c])


def test_floor_line_reports_the_floor_against_the_baseline_seed_by_seed() -> None:
    assert floor_line(ROWS[0]) == ""  # replay runs know no floor: nothing is claimed
    setup = {"policy": "lru", "tiers": "gpu", "router": "pow2", "replicas": 4}
    setup |= {"device_budget_tokens": 1000, "host_budget_tokens": 0}
    runs = [dataclasses.replace(_m(t), mean_llm_floor_s=f) for t, f in ((10.0, 5.0), (20.0, 5.0))]
    line = floor_line(row(setup, runs))
    assert "0.38 [0.25-0.50]" in line  # 5/10 and 5/20 (LLM time = TTFT in these rows)
    # a baseline run without floors takes them from another set-up on the same seeds
    assert floor_line(ROWS[0], [ROWS[3], row(setup, runs)]) == line


def test_by_sessions_gives_one_row_per_load_and_full_system_setup(tmp_path: Path, capsys) -> None:
    light, heavy = tmp_path / "light.json", tmp_path / "heavy.json"
    write_json(light, {"seeds": [0, 1], "sessions": 8}, [ROWS[0], ROWS[5]])
    write_json(heavy, {"seeds": [0, 1], "sessions": 16}, [ROWS[0], ROWS[4], ROWS[5]])
    assert main(["--by-sessions", str(heavy), str(light)]) == 0
    lines = [
        ln
        for ln in capsys.readouterr().out.splitlines()
        if ln.startswith("| 8") or ln.startswith("| 16")
    ]
    assert [ln.split(" | ")[:2] for ln in lines] == [
        ["| 8", "return_aware/gpu+cpu/affinity"],
        ["| 16", "lru/gpu+cpu/affinity"],
        ["| 16", "return_aware/gpu+cpu/affinity"],
    ]
    assert "0.15 [0.10-0.20]" in lines[0] and lines[0].endswith("| - |")  # no floor in replay rows
