"""Results of `penelope bench capacity`: runs, the best peer, ratios, attribution, table, plot.

A run is one set-up over several seeds: `sessions_at_slo` as the mean over
seeds and `per_seed`, and its curve (session count -> the figures, averaged
over the seeds that ran that count, with `seeds` saying how many). The best
peer is the peer with the most sessions at the SLO, over the whole grid and
also seed by seed; `ratio` is Penelope's count over the best peer's, per seed,
and the same for `crossing` (where p90 TTFT crosses the SLO, interpolated in
the bisection's bracket on a log p90 axis: `SearchResult.crossing`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench.experiments.capacity_search import SearchResult, crossing
from bench.report import pyplot, save_figure, spread
from penelope_engine.protocol import MISS_CAUSES

CURVE_METRICS = (
    "mean_ttft_s",
    "p90_ttft_s",
    "mean_queue_s",
    "hit_ratio",
    "mean_llm_time_s",
    "recompute_ratio",
    "host_ratio",
    "store_ratio",
    *(f"miss_{c}_ratio" for c in MISS_CAUSES),  # computed tokens by cause / prompt tokens
)


def capacity_run(
    about: dict[str, Any], slo_s: float, results: dict[int, SearchResult]
) -> dict[str, Any]:
    """One set-up's run from its per-seed search results (seed -> result)."""
    seeds = sorted(results)
    counts = sorted({n for r in results.values() for n in r.curve})
    curve = {}
    for n in counts:
        pts = [results[s].curve[n] for s in seeds if n in results[s].curve]
        curve[str(n)] = {k: float(np.mean([p[k] for p in pts])) for k in CURVE_METRICS}
        curve[str(n)]["seeds"] = len(pts)
    return {
        **about,
        "slo_s": slo_s,
        "sessions_at_slo": float(np.mean([results[s].sessions_at_slo for s in seeds])),
        "per_seed": {
            "seed": seeds,
            "sessions_at_slo": [results[s].sessions_at_slo for s in seeds],
            "crossing": [round(results[s].crossing(slo_s), 1) for s in seeds],
            "capped": [results[s].capped for s in seeds],
        },
        "crossing": float(np.mean([results[s].crossing(slo_s) for s in seeds])),
        "curve": curve,
        "curve_per_seed": {str(s): {str(n): p for n, p in results[s].curve.items()} for s in seeds},
    }


def best_peer(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The peer with the most sessions at the SLO (mean over seeds), and seed by seed."""
    peers = [r for r in runs if r["system"] != "penelope"]
    if not peers:
        return {}
    pick = max(peers, key=lambda r: r["sessions_at_slo"])
    per_seed = np.max([r["per_seed"]["sessions_at_slo"] for r in peers], axis=0)
    return {
        "setup": pick["name"],
        "sessions_at_slo": pick["sessions_at_slo"],
        "per_seed_best": [int(x) for x in per_seed],
        "per_seed_setup": [_best_at(peers, i)["name"] for i in range(len(per_seed))],
    }


def _best_at(peers: list[dict[str, Any]], i: int) -> dict[str, Any]:
    return max(peers, key=lambda r: r["per_seed"]["sessions_at_slo"][i])


def ratios(runs: list[dict[str, Any]], best: dict[str, Any]) -> dict[str, Any]:
    """Each Penelope set-up's sessions at the SLO over the best peer's, per seed (none when
    the best peer holds no session at the SLO on some seed)."""
    if not best:
        return {}
    theirs = np.asarray(best["per_seed_best"], dtype=float)
    if not theirs.all():  # a seed where no peer holds even the smallest count: no ratio
        return {}
    peers = [r for r in runs if r["system"] != "penelope"]
    cross = np.max([r["per_seed"]["crossing"] for r in peers], axis=0)
    out = {}
    for r in runs:
        if r["system"] != "penelope":
            continue
        x = np.asarray(r["per_seed"]["sessions_at_slo"], dtype=float) / theirs
        c = np.asarray(r["per_seed"]["crossing"], dtype=float) / cross
        out[r["name"]] = {**spread(x), "crossing": spread(c)}
    return out


def attribution_rows(
    at: int, rows: dict[str, dict[int, dict[str, float]]], best_name: str
) -> dict[str, Any]:
    """Figures of every row at the best peer's capacity, with per-seed ratios to it."""
    base = rows.get(best_name)
    out: dict[str, Any] = {"sessions": at, "best_peer": best_name, "rows": {}}
    for name, per_seed in rows.items():
        seeds = sorted(per_seed)
        row: dict[str, Any] = {
            k: float(np.mean([per_seed[s][k] for s in seeds])) for k in CURVE_METRICS
        }
        if base is not None:
            for k in ("mean_ttft_s", "p90_ttft_s", "mean_llm_time_s"):
                x = [per_seed[s][k] / max(base[s][k], 1e-12) for s in seeds]
                row[f"{k}_vs_best"] = spread(x)
        out["rows"][name] = row
    return out


def table(runs: list[dict[str, Any]], best: dict[str, Any], ratio: dict[str, Any]) -> str:
    head = f"{'set-up':44} {'sessions@SLO':>12} {'per seed':>14} {'crossing':>9} {'per seed':>18}"
    lines = [head]
    for r in sorted(runs, key=lambda r: -r["sessions_at_slo"]):
        seeds = ",".join(str(x) for x in r["per_seed"]["sessions_at_slo"])
        cross = ",".join(f"{x:.0f}" for x in r["per_seed"]["crossing"])
        cap = " (cap)" if any(r["per_seed"]["capped"]) else ""
        lines.append(
            f"{r['name']:44} {r['sessions_at_slo']:12.1f} {seeds:>14} {r['crossing']:9.1f} "
            f"{cross:>18}{cap}"
        )
    if best:
        lines.append(f"best peer: {best['setup']} ({best['sessions_at_slo']:.1f})")
    for name, x in ratio.items():
        c = x["crossing"]
        lines.append(
            f"{name}: {x['mean']:.2f}x [{x['min']:.2f}-{x['max']:.2f}] the best peer; "
            f"at the SLO crossing {c['mean']:.2f}x [{c['min']:.2f}-{c['max']:.2f}]"
        )
    return "\n".join(lines)


def attribution_table(att: dict[str, Any]) -> str:
    lines = [
        f"at the best peer's capacity ({att['sessions']} sessions; ratios to {att['best_peer']})",
        f"{'row':52} {'mean TTFT':>10} {'p90 TTFT':>10} {'LLM time':>10} {'TTFT x':>8} "
        f"{'LLM x':>8}",
    ]
    for name, r in att["rows"].items():
        tx = r.get("mean_ttft_s_vs_best", {}).get("mean", float("nan"))
        lx = r.get("mean_llm_time_s_vs_best", {}).get("mean", float("nan"))
        lines.append(
            f"{name:52} {r['mean_ttft_s']:10.3g} {r['p90_ttft_s']:10.3g} "
            f"{r['mean_llm_time_s']:10.4g} {tx:8.2f} {lx:8.2f}"
        )
    return "\n".join(lines)


def plot(path: Path, runs: list[dict[str, Any]], slo_s: float, title: str) -> Path:
    """p90 TTFT against sessions, one line per set-up, the SLO dashed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in runs:
        xs = sorted(int(n) for n in r["curve"])
        ax.plot(xs, [r["curve"][str(n)]["p90_ttft_s"] for n in xs], marker="o", label=r["name"])
    ax.axhline(slo_s, linestyle="--", color="grey", label=f"SLO {slo_s:g} s")
    ax.set_xlabel("concurrent sessions (4 replicas)")
    ax.set_ylabel("p90 TTFT (s)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def points(got: list[tuple[str, int, dict[str, float]]], counts: Any) -> dict[str, Any]:
    """`--points` results (set-up, seed, figures), in the order run with `counts`, as
    set-up -> count -> the means over seeds and the per-seed figures."""
    out: dict[str, Any] = {}
    for (name, seed, figures), n in zip(got, counts, strict=True):
        out.setdefault(name, {}).setdefault(str(n), {"per_seed": {}})["per_seed"][str(seed)] = (
            figures
        )
    for per_count in out.values():
        for row in per_count.values():
            seeds = list(row["per_seed"].values())
            row.update({k: float(np.mean([f[k] for f in seeds])) for k in CURVE_METRICS})
    return out


def point_crossings(doc: dict[str, Any], slo_s: float) -> dict[str, dict[str, float]]:
    """Per set-up and seed, where the `--points` curve's p90 crosses the SLO
    (`capacity_search.crossing`: 0 when even the first count is above it, the last
    count when none is)."""
    out: dict[str, dict[str, float]] = {}
    for name, per_count in doc.items():
        seeds = next(iter(per_count.values()))["per_seed"]
        out[name] = {
            s: crossing(
                {int(n): r["per_seed"][s]["p90_ttft_s"] for n, r in per_count.items()}, slo_s
            )
            for s in seeds
        }
    return out


def points_table(doc: dict[str, Any]) -> str:
    head = f"{'set-up':44} {'sessions':>8} {'mean TTFT':>9} {'p90 TTFT':>9} {'p90 per seed':>24}"
    head += f" {'hit':>6} {'LLM s':>7}"
    lines = [head]
    for name, per_count in doc.items():
        for n, row in per_count.items():
            p90s = ", ".join(f"{f['p90_ttft_s']:.2f}" for f in row["per_seed"].values())
            lines.append(
                f"{name:44} {n:>8} {row['mean_ttft_s']:9.3f} {row['p90_ttft_s']:9.3f} {p90s:>24}"
                f" {row['hit_ratio']:6.3f} {row['mean_llm_time_s']:7.1f}"
            )
    return "\n".join(lines)
