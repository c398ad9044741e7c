"""Per-run summaries, ratios to the baseline server, the table and the plot.

A run is one server on one seed's plan at one KV capacity. Its summary:
requests, errors, mean / p50 / p90 TTFT and E2E over the requests that
finished, the hit ratio (cached over prompt tokens, from the servers' own
usage), wall time. `ratios` divides each server's figures by the baseline's on
the same seed and capacity; the table shows the mean over seeds and the range.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.report import pyplot, save_figure, spread

FIGURES = ("mean_ttft_s", "p50_ttft_s", "p90_ttft_s", "mean_e2e_s", "p90_e2e_s", "mean_jct_s")


def _stats(xs: Sequence[float], name: str) -> dict[str, float | None]:
    if not xs:
        return {f"mean_{name}": None, f"p50_{name}": None, f"p90_{name}": None}
    a = np.asarray(xs)
    return {
        f"mean_{name}": float(a.mean()),
        f"p50_{name}": float(np.percentile(a, 50)),
        f"p90_{name}": float(np.percentile(a, 90)),
    }


def mean_jct_s(records: Sequence[dict[str, Any]]) -> float | None:
    """Mean over sessions whose every request finished of the job completion time: first
    request sent to last token (tool gaps included, as the agent lives it)."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by[r["session"]].append(r)
    jcts = [
        max(r["sent_s"] + r["e2e_s"] for r in rs) - min(r["sent_s"] for r in rs)
        for rs in by.values()
        if not any(r["error"] for r in rs)
    ]
    return float(np.mean(jcts)) if jcts else None


def summarize(records: Sequence[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    ok = [r for r in records if not r["error"]]
    prompt = sum(r["prompt_tokens"] for r in ok)
    return {
        "requests": len(records),
        "errors": len(records) - len(ok),
        **_stats([r["ttft_s"] for r in ok], "ttft_s"),
        **_stats([r["e2e_s"] for r in ok], "e2e_s"),
        "mean_jct_s": mean_jct_s(records),
        "prompt_tokens": prompt,
        "cached_tokens": sum(r["cached_tokens"] for r in ok),
        "hit_ratio": sum(r["cached_tokens"] for r in ok) / prompt if prompt else 0.0,
        "wall_s": wall_s,
    }


def cell(run: dict[str, Any]) -> tuple[Any, Any]:
    """The sweep cell a run belongs to: (capacity, offered load), None where not swept."""
    return run["kv_tokens"], run.get("load")


def ratios(runs: Sequence[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """Per (capacity, load, seed), each non-baseline server's figures / the baseline's."""
    base = {(*cell(r), r["seed"]): r for r in runs if r["server"] == baseline}
    out = []
    for r in runs:
        b = base.get((*cell(r), r["seed"]))
        if r["server"] == baseline or b is None:
            continue
        s, bs = r["summary"], b["summary"]
        row = {"server": r["server"], "baseline": baseline, "kv_tokens": r["kv_tokens"]}
        row["load"], row["seed"] = r.get("load"), r["seed"]
        for f in FIGURES:
            row[f] = s[f] / bs[f] if s.get(f) is not None and bs.get(f) else None
        out.append(row)
    return out


def grouped(runs: Sequence[dict[str, Any]], rats: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (capacity, load, server): figures as the mean over seeds, ratios with
    range."""
    by: dict[tuple[Any, Any, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by[(*cell(r), r["server"])].append(r)
    rby: dict[tuple[Any, Any, str], list[dict[str, Any]]] = defaultdict(list)
    for q in rats:
        rby[(*cell(q), q["server"])].append(q)
    rows = []
    for (kv, load, name), rs in by.items():
        row: dict[str, Any] = {"kv_tokens": kv, "load": load, "server": name, "seeds": len(rs)}
        row["kv_read_back"] = sorted({str(r["kv_capacity"].get("tokens")) for r in rs})
        row["working_set_tokens"] = rs[0]["working_set_tokens"]
        for f in (*FIGURES, "hit_ratio", "wall_s", "errors"):
            vals = [r["summary"][f] for r in rs if r["summary"].get(f) is not None]
            row[f] = float(np.mean(vals)) if vals else None
        for f in ("mean_ttft_s", "p90_ttft_s", "mean_e2e_s", "mean_jct_s"):
            vals = [q[f] for q in rby.get((kv, load, name), []) if q.get(f) is not None]
            if vals:
                row[f"ratio_{f}"] = spread(vals)
        rows.append(row)
    return sorted(rows, key=lambda r: (-(r["kv_tokens"] or 0), r["load"] or 0, r["server"]))


def _ratio(row: dict[str, Any], f: str) -> str:
    r = row.get(f"ratio_{f}")
    return f"{r['mean']:.2f} [{r['min']:.2f}-{r['max']:.2f}]" if r else "-"


def table(rows: Sequence[dict[str, Any]], raw: dict[str, float | None]) -> str:
    head = (
        f"{'kv tokens':>9} {'kv/ws':>5} {'load':>5} {'server':<16} {'TTFT mean':>9} {'p90':>7} "
        f"{'E2E':>7} {'JCT':>7} {'hit':>5} {'wall':>6} {'err':>3}  {'x base: TTFT mean':<18} "
        f"{'p90':<18} {'E2E':<18} {'JCT':<18}"
    )
    lines = [head]
    for r in rows:
        ws = r["working_set_tokens"]
        kv = r["kv_tokens"]
        frac = f"{kv / ws:.2f}" if kv and ws else "-"

        def num(v: float | None) -> str:
            return f"{v:.3f}" if v is not None else "-"

        lines.append(
            f"{kv or '-':>9} {frac:>5} {r.get('load') or '-':>5} {r['server']:<16} "
            f"{num(r['mean_ttft_s']):>9} "
            f"{num(r['p90_ttft_s']):>7} {num(r['mean_e2e_s']):>7} {num(r.get('mean_jct_s')):>7} "
            f"{r['hit_ratio']:>5.2f} {r['wall_s']:>6.1f} {int(r['errors'] or 0):>3}  "
            f"{_ratio(r, 'mean_ttft_s'):<18} {_ratio(r, 'p90_ttft_s'):<18} "
            f"{_ratio(r, 'mean_e2e_s'):<18} {_ratio(r, 'mean_jct_s'):<18}"
        )
    lines.append("raw speed, cold prefill TTFT: " + ", ".join(
        f"{k} {v:.3f} s" if v is not None else f"{k} -" for k, v in raw.items()
    ))  # fmt: skip
    return "\n".join(lines)


def plot(path: Path, runs: Sequence[dict[str, Any]], title: str) -> Path:
    """Per capacity: the TTFT CDF per server (seeds pooled), and mean TTFT per turn."""
    plt = pyplot()
    kvs = sorted({r["kv_tokens"] or 0 for r in runs}, reverse=True)
    fig, axes = plt.subplots(2, len(kvs), figsize=(4.5 * len(kvs), 7), squeeze=False)
    for j, kv in enumerate(kvs):
        by: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in runs:
            if (r["kv_tokens"] or 0) == kv:
                by[r["server"]] += [q for q in r["records"] if not q["error"]]
        for name, recs in sorted(by.items()):
            t = np.sort([q["ttft_s"] for q in recs])
            axes[0][j].plot(t, np.arange(1, len(t) + 1) / max(len(t), 1), label=name)
            turns: dict[int, list[float]] = defaultdict(list)
            for q in recs:
                turns[q["turn"]].append(q["ttft_s"])
            ks = sorted(turns)
            axes[1][j].plot(ks, [np.mean(turns[k]) for k in ks], marker=".", label=name)
        axes[0][j].set(title=f"KV {kv or 'as running'} tokens", xlabel="TTFT (s)", ylabel="CDF")
        axes[0][j].set_xscale("log")
        axes[1][j].set(xlabel="turn", ylabel="mean TTFT (s)")
        axes[0][j].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path, dpi=110)
