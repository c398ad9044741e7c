"""Results of `bench simulate` (and `bench replay`): JSON, a table, PNGs.

One *row* is one set-up (policy, tiers, router, replicas, device budget) run
over several seeds: each metric is the mean over seeds, `*_spread` is the
[min, max] over seeds, and `per_seed` keeps every seed's value so that ratios
to a baseline can be taken seed by seed (same sessions, same arrivals).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.report import pyplot, save_figure
from bench.sim.metrics import RunMetrics

METRICS = (
    "mean_ttft_s",
    "p90_ttft_s",
    "mean_jct_s",
    "mean_llm_time_s",
    "mean_queue_s",
    "hit_ratio",
    "partial_return_ratio",
    "recompute_ratio",
)
SPREAD = ("mean_ttft_s", "mean_jct_s", "mean_llm_time_s")
FLOOR = "mean_llm_floor_s"  # simulator only: the least LLM time any cache could give
SETUP = ("policy", "tiers", "router", "replicas", "device_budget_tokens")
BASELINE = {"policy": "lru", "tiers": "gpu", "router": "pow2"}


def row(setup: dict[str, Any], runs: Sequence[RunMetrics]) -> dict[str, Any]:
    """One row of the issue's schema from the runs of one set-up (one per seed)."""
    if not runs:
        raise ValueError(f"no runs for {setup}")
    out: dict[str, Any] = {k: setup[k] for k in SETUP}
    out["host_budget_tokens"] = setup.get("host_budget_tokens", 0)
    out["seeds"] = len(runs)
    for name in METRICS:
        vals = [getattr(r, name) for r in runs]
        out[name] = float(np.mean(vals))
        if name in SPREAD:
            out[f"{name}_spread"] = [float(min(vals)), float(max(vals))]
    out["requests"] = sum(r.requests for r in runs)
    out["failed_requests"] = sum(r.failed_requests for r in runs)
    ledger = [r.miss_ratios() for r in runs]  # the miss ledger: `miss_<cause>_ratio`
    out.update({k: float(np.mean([x[k] for x in ledger])) for k in ledger[0]})
    out["per_seed"] = {name: [getattr(r, name) for r in runs] for name in SPREAD}
    floors = [r.mean_llm_floor_s for r in runs if r.mean_llm_floor_s is not None]
    if len(floors) == len(runs):
        out[FLOOR] = float(np.mean(floors))
        out["per_seed"][FLOOR] = floors
    return out


def ratios(rows: Sequence[dict[str, Any]], baseline: dict[str, Any] = BASELINE) -> list[dict]:
    """Each row against the baseline at the same replicas and budget, seed by seed."""
    base = {
        (r["replicas"], r["device_budget_tokens"]): r
        for r in rows
        if all(r[k] == v for k, v in baseline.items())
    }
    out = []
    for r in rows:
        b = base.get((r["replicas"], r["device_budget_tokens"]))
        if b is None or b is r:
            continue
        entry = {k: r[k] for k in SETUP}
        for name in SPREAD:
            per = np.array(r["per_seed"][name]) / np.array(b["per_seed"][name])
            entry[f"{name}_ratio"] = float(per.mean())
            entry[f"{name}_ratio_spread"] = [float(per.min()), float(per.max())]
        if FLOOR in b["per_seed"]:  # how far below the baseline's LLM time any cache could go
            floor = np.array(b["per_seed"][FLOOR]) / np.array(b["per_seed"]["mean_llm_time_s"])
            entry["llm_time_floor_ratio"] = float(floor.mean())
            entry["llm_time_floor_ratio_spread"] = [float(floor.min()), float(floor.max())]
        out.append(entry)
    return out


def write_json(path: str | Path, config: dict[str, Any], rows: Sequence[dict[str, Any]]) -> None:
    doc = {"config": config, "runs": list(rows), "ratios_to_baseline": ratios(rows)}
    Path(path).write_text(json.dumps(doc, indent=1, default=str))


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """A fixed-width table: one line per row, then the ratios to the baseline."""
    head = (
        "policy",
        "tiers",
        "router",
        "rep",
        "budget",
        "ttft",
        "ttft lo-hi",
        "p90",
        "jct",
        "llm",
        "queue",
        "hit",
        "partial",
        "recomp",
        "failed",
    )
    lines = [" ".join(f"{h:>11}" for h in head)]
    for r in rows:
        lo, hi = r["mean_ttft_s_spread"]
        cells = (
            r["policy"],
            r["tiers"],
            r["router"],
            r["replicas"],
            r["device_budget_tokens"],
            _fmt(r["mean_ttft_s"]),
            f"{_fmt(lo)}-{_fmt(hi)}",
            _fmt(r["p90_ttft_s"]),
            _fmt(r["mean_jct_s"]),
            _fmt(r["mean_llm_time_s"]),
            _fmt(r["mean_queue_s"]),
            f"{r['hit_ratio']:.3f}",
            f"{r['partial_return_ratio']:.3f}",
            f"{r['recompute_ratio']:.3f}",
            r["failed_requests"],
        )
        lines.append(" ".join(f"{str(c):>11}" for c in cells))
    rel = ratios(rows)
    if rel:
        lines.append("\nvs baseline (lru, gpu, pow2) at the same budget, per-seed ratio [min-max]:")
        for e in rel:
            parts = [
                f"{n.removesuffix('_s')} {e[n + '_ratio']:.2f} "
                f"[{e[n + '_ratio_spread'][0]:.2f}-{e[n + '_ratio_spread'][1]:.2f}]"
                for n in SPREAD
            ]
            lines.append(
                f"  {e['policy']:>12} {e['tiers']:>8} {e['router']:>8} "
                f"{e['device_budget_tokens']:>9}: " + ", ".join(parts)
            )
    return "\n".join(lines)


def _label(r: dict[str, Any]) -> str:
    return f"{r['policy']}/{r['tiers']}/{r['router']}"


def plot(
    out_dir: str | Path,
    rows: Sequence[dict[str, Any]],
    ttfts: Iterable[tuple[dict[str, Any], Sequence[float]]],
) -> list[Path]:
    """TTFT CDF per set-up (at the smallest budget), TTFT and JCT versus device budget."""
    plt = pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for setup, values in ttfts:
        vals = np.sort(np.asarray(values))
        ax.plot(vals, np.arange(1, len(vals) + 1) / len(vals), label=_label(setup))
    ax.set(xscale="log", xlabel="TTFT (s)", ylabel="fraction of requests", title="TTFT CDF")
    ax.legend(fontsize=7)
    paths.append(save_figure(fig, out / "ttft_cdf.png"))
    for metric, name in (("mean_ttft_s", "ttft"), ("mean_jct_s", "jct")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for label in sorted({_label(r) for r in rows}):
            rs = sorted(
                (r for r in rows if _label(r) == label), key=lambda r: r["device_budget_tokens"]
            )
            xs = [r["device_budget_tokens"] for r in rs]
            ax.errorbar(
                xs,
                [r[metric] for r in rs],
                fmt="o-",
                capsize=3,
                label=label,
                yerr=np.abs(
                    np.array([r[f"{metric}_spread"] for r in rs]).T - [r[metric] for r in rs]
                ),
            )
        ax.set(
            xlabel="device budget (tokens per replica)",
            ylabel=f"{metric} (mean over seeds)",
            yscale="log",
            title=f"{name.upper()} vs device budget",
        )
        ax.legend(fontsize=7)
        paths.append(save_figure(fig, out / f"{name}_vs_budget.png"))
    return paths
