"""`penelope bench capacity`: agent sessions per fleet within a p90 TTFT SLO, per set-up.

The operator's number: for each set-up (a router over an engine cache,
`bench.sim.setups`), the largest number of concurrent Claude Code sessions
that `--replicas` simulated GPUs hold with p90 TTFT <= `--slo-s` (default
2.0 s at true lengths, 0.5 s at 1/4 length), found per seed by doubling and
bisection on the session count (`bench.experiments.capacity_search`). Then, at the
best peer's capacity, the attribution rows: the best peer's router over
Penelope's cache, Penelope's router over the best peer's cache, and Penelope
with each lever off. JSON: `runs[]` (system, router, cache, levers, slo_s,
sessions_at_slo and per seed, curve), `best_peer`, `ratio`, `attribution`;
a table and a plot of p90 TTFT against sessions. Example::

    penelope bench capacity --lengths true --seeds 3 --jobs 2 --json cap.json --plot cap.png
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.experiments import capacity_report as report
from bench.experiments.capacity_search import (
    LENGTHS,
    SLO_S,
    SearchResult,
    SearchSpec,
    WorkloadSpec,
    point,
    search,
)
from bench.experiments.peers import sim_config
from bench.experiments.peers_report import describe
from bench.sim.cliargs import add_fleet_args, comma_list
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel
from bench.sim.setups import CACHES, Setup, ablations, cross_setup, hinted, penelope_setup, setups
from penelope_cli.helpformat import parser

# Penelope and the grid's strongest set-ups at 96 sessions (`bench peers`): what a run
# without --setups measures, so that it ends in under 40 minutes here with --jobs 2.
DEFAULT_SETUPS = (
    "penelope",
    "sglang-hicache/llm_d",
    "sglang-hicache/ray_prefix_t10",
    "sglang-hicache/sgl_cache_aware_abs16",
    "sglang-hicache/ray_session_hash",
)


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope bench capacity", __doc__)
    add_fleet_args(ap, tuple(LENGTHS))
    ap.add_argument(
        "--slo-s", type=float, default=None, help="p90 TTFT target (default: 2.0 true, 0.5 quarter)"
    )
    ap.add_argument("--start", type=int, default=32, help="first session count of each search")
    ap.add_argument("--max-sessions", type=int, default=1024, help="the search's cap")
    ap.add_argument("--resolution", type=int, default=8, help="bisection stops at this bracket")
    ap.add_argument(
        "--setups",
        type=comma_list(str),
        default=list(DEFAULT_SETUPS),
        help="set-up names (`bench peers` names them)",
    )
    ap.add_argument("--no-attribution", action="store_true", help="skip the attribution rows")
    ap.add_argument(
        "--attribution-at",
        type=int,
        default=None,
        help="no search: the attribution rows at this many sessions, the best peer being "
        "the first peer of --setups (its capacity from an earlier run)",
    )
    ap.add_argument(
        "--rows",
        type=comma_list(str),
        default=None,
        help="attribution rows to run besides the best peer's (names as printed; default: all)",
    )
    ap.add_argument(
        "--points",
        type=comma_list(int),
        default=None,
        help="no search: every set-up's figures at these session counts, every seed",
    )
    ap.add_argument("--jobs", type=int, default=1, help="searches run in parallel")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--plot", type=Path, default=None, help="PNG of p90 TTFT against sessions")
    return ap


def attribution_setups(best: Setup) -> list[Setup]:
    """Penelope, the best peer, each router over the other's cache, Penelope's ablations."""
    ours = penelope_setup()
    return [ours, best, cross_setup(ours, best.router), cross_setup(best, "affinity"), *ablations()]


def _search(job: tuple) -> tuple[int, int, SearchResult]:
    i, seed, spec, cfg, cost, s, name = job

    def measure(n: int) -> dict[str, float]:
        t0 = time.perf_counter()
        figures = point(spec, cfg, cost, n, seed)
        print(
            f"  {name} seed={seed} sessions={n}: p90 TTFT {figures['p90_ttft_s']:.3f} s "
            f"({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        return figures

    return i, seed, search(measure, s)


def _point(job: tuple) -> tuple[str, int, dict[str, float]]:
    name, seed, spec, cfg, cost, n = job
    return name, seed, point(spec, cfg, cost, n, seed)


def _run(pool: ProcessPoolExecutor, fn: Any, jobs: list[tuple]) -> list[Any]:
    out = []
    for k, result in enumerate(pool.map(fn, jobs), 1):
        print(f"[{k}/{len(jobs)}] {result[0]} seed={result[1]}", file=sys.stderr, flush=True)
        out.append(result)
    return out


def _attribution(
    pool: ProcessPoolExecutor, best: Setup, at: int, seeds: range, spec: WorkloadSpec,
    cost: GpuCostModel, cfg: Any, only: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """`attribution_setups(best)` (or the rows named in `only`) at `at` sessions, every seed."""
    rows = attribution_setups(best)
    if only is not None:
        unknown = sorted(set(only) - {x.name for x in rows})
        if unknown:
            raise SystemExit(f"unknown attribution rows {unknown}; valid: {[x.name for x in rows]}")
        rows = [x for x in rows if x.name in only or x.name == best.name]  # ratios need it
    jobs = [(x.name, seed, spec, cfg(x), cost, at) for x in rows for seed in seeds]
    per: dict[str, dict[int, dict[str, float]]] = {x.name: {} for x in rows}
    for name, seed, figures in _run(pool, _point, jobs):
        per[name][seed] = figures
    return report.attribution_rows(at, per, best.name)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    slo = args.slo_s if args.slo_s is not None else SLO_S[args.lengths]
    cost = GpuCostModel(QWEN3[args.model], HARDWARE[args.gpu])
    budget = args.device_budget_tokens or cost.kv_capacity_tokens()
    spec = WorkloadSpec(args.trace_file, args.lengths, args.window_tokens, args.mean_interarrival_s)
    s = SearchSpec(slo, args.start, args.max_sessions, args.resolution)
    chosen = [hinted(x, args.hints) for x in setups(args.setups, with_ablations=False)]
    seeds = range(args.seed_base, args.seed_base + args.seeds)

    def cfg(setup: Setup) -> Any:
        x = hinted(setup, args.hints)  # --hints: every row over Penelope's engine
        return sim_config(
            x, budget, args.host_budget_factor, args.replicas, args.store, args.hint_noise
        )

    if args.points:
        with ProcessPoolExecutor(max(1, args.jobs)) as pool:
            got = _run(pool, _point, [
                (x.name, seed, spec, cfg(x), cost, n)
                for n in args.points for x in chosen for seed in seeds
            ])  # fmt: skip
        counts = iter(n for n in args.points for _ in chosen for _ in seeds)
        doc = report.points(got, counts)
        crossings = report.point_crossings(doc, slo)
        print(report.points_table(doc))
        for name, per_seed in crossings.items():
            print(
                f"{name}: SLO crossing per seed " + ", ".join(f"{c:.1f}" for c in per_seed.values())
            )
        if args.json is not None:
            args.json.write_text(json.dumps({"points": doc, "crossings": crossings}, indent=1))
        if args.plot is not None:
            curves = [{"name": name, "curve": per_count} for name, per_count in doc.items()]
            title = f"{args.lengths} lengths, {args.replicas} replicas, {args.seeds} seeds"
            print(f"wrote {report.plot(args.plot, curves, slo, title)}", file=sys.stderr)
        return 0
    if args.attribution_at is not None:
        peer = next((x for x in chosen if x.system != "penelope"), None)
        if peer is None or args.attribution_at < 1:
            raise SystemExit("--attribution-at needs a positive count and a peer in --setups")
        with ProcessPoolExecutor(max(1, args.jobs)) as pool:
            only = _attribution(pool, peer, args.attribution_at, seeds, spec, cost, cfg, args.rows)
        print(report.attribution_table(only))
        if args.json is not None:
            args.json.write_text(json.dumps({"attribution": only}, indent=1))
        return 0
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        jobs = [
            (i, seed, spec, cfg(x), cost, s, x.name) for i, x in enumerate(chosen) for seed in seeds
        ]
        found: dict[int, dict[int, SearchResult]] = {i: {} for i in range(len(chosen))}
        for i, seed, result in _run(pool, _search, jobs):
            found[i][seed] = result
        runs = [report.capacity_run(describe(x), slo, found[i]) for i, x in enumerate(chosen)]
        best = report.best_peer(runs)
        attribution: dict[str, Any] | None = None
        if best and not args.no_attribution:
            at = max(1, round(best["sessions_at_slo"]))
            peer = next(x for x in chosen if x.name == best["setup"])
            attribution = _attribution(pool, peer, at, seeds, spec, cost, cfg, args.rows)
    ratio = report.ratios(runs, best)
    print(report.table(runs, best, ratio))
    if attribution is not None:
        print(report.attribution_table(attribution))
    doc = {
        "config": {
            **{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "slo_s": slo,
            "device_budget_tokens": budget,
            "cost_model": cost.describe(),
            "caches": sorted(CACHES),
        },
        "runs": runs,
        "best_peer": best,
        "ratio": ratio,
        "attribution": attribution,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=1))
    if args.plot is not None:
        title = f"{args.lengths} lengths, {args.replicas} replicas, {args.seeds} seeds"
        print(f"wrote {report.plot(args.plot, runs, slo, title)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
