"""Issue 58's targets, checked per cell (capacity, load) against the best peer at that cell.

At each offered load Penelope's figure (mean over seeds) is divided by the best peer's
(the lowest mean over seeds among the other servers, figure by figure), and held to:

    load 0.5   mean TTFT <= 0.5x, p90 TTFT <= 0.6x, session JCT <= 0.8x
    load 0.9   mean TTFT <= 0.7x
    load 1.2   mean TTFT <= 0.9x
    every load Penelope's cached share >= every peer's; 0 errors on every server

A load with no target of its own (or a run without `--load`) is checked on the
cached share and the errors only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TARGETS: dict[float, dict[str, float]] = {
    0.5: {"mean_ttft_s": 0.5, "p90_ttft_s": 0.6, "mean_jct_s": 0.8},
    0.9: {"mean_ttft_s": 0.7},
    1.2: {"mean_ttft_s": 0.9},
}


def check(rows: Sequence[dict[str, Any]], ours: str = "penelope") -> list[dict[str, Any]]:
    """One verdict per (capacity, load) cell where `ours` and at least one peer ran; `rows`
    are `report.grouped`'s (means over seeds)."""
    cells: dict[tuple[Any, Any], dict[str, dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["kv_tokens"], r["load"]), {})[r["server"]] = r
    out = []
    for (kv, load), by in cells.items():
        if ours not in by or len(by) < 2:
            continue
        mine, peers = by[ours], {n: r for n, r in by.items() if n != ours}
        figures = []
        for f, bound in TARGETS.get(load, {}).items():
            best = min(peers, key=lambda n: peers[n][f] if peers[n][f] is not None else 1e300)
            theirs = peers[best][f]
            ratio = mine[f] / theirs if mine[f] is not None and theirs else None
            met = ratio is not None and ratio <= bound
            figures.append({"figure": f, "best_peer": best, "ratio": ratio, "target": bound,
                            "met": met})  # fmt: skip
        share = mine["hit_ratio"] >= max(r["hit_ratio"] for r in peers.values())
        errors = sum(int(r["errors"] or 0) for r in by.values())
        out.append({
            "kv_tokens": kv, "load": load, "seeds": mine["seeds"], "figures": figures,
            "cached_share": mine["hit_ratio"],
            "best_peer_cached_share": max(r["hit_ratio"] for r in peers.values()),
            "cached_share_met": share, "errors": errors,
            "met": all(x["met"] for x in figures) and share and errors == 0,
        })  # fmt: skip
    return out


def table(verdicts: Sequence[dict[str, Any]]) -> str:
    lines = [f"{'kv tokens':>9} {'load':>5}  {'target':<40} {'cached share':<22} {'err':>3}  ok"]
    for v in verdicts:
        figs = ", ".join(
            f"{x['figure'].removesuffix('_s')} {x['ratio']:.2f}x<={x['target']} vs {x['best_peer']}"
            if x["ratio"] is not None else f"{x['figure']} -"
            for x in v["figures"]
        ) or "-"  # fmt: skip
        share = f"{v['cached_share']:.2f} vs {v['best_peer_cached_share']:.2f}"
        lines.append(f"{v['kv_tokens'] or '-':>9} {v['load'] or '-':>5}  {figs:<40} {share:<22} "
                     f"{v['errors']:>3}  {'met' if v['met'] else 'MISSED'}")  # fmt: skip
    return "\n".join(lines)
