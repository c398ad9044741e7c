"""`penelope bench soak`: many requests against the standalone server; state must stay flat.

    penelope bench soak [--requests 100000] [--json OUT] [--plot PNG]

This process serves the OpenAI API (tiny Qwen3, a store in a temp dir,
short record TTLs) and samples its state; a spawned client sends
`--requests` short requests, sessionless ones and multi-turn sessions,
`--concurrency` at a time. After the first `--warmup-share` of them, every
count (session records, tree nodes, pages per tier, store bytes, path
records, retention gaps, handover sessions) must be flat against requests
finished, and resident memory within 5 % of its level at warm-up end.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.report import pyplot, save_figure, text_table
from bench.soak.config import SoakConfig
from bench.soak.server import run_soak

PLOT_COLUMNS = 3


def table(r: dict[str, Any]) -> str:
    """One row per series: level at warm-up end, at the end, slope per 10K, flat."""
    rows = [("series", "at warm-up", "end", "slope/10K", "flat")]
    for name, f in r["slopes"].items():
        levels = (f["level_at_warmup"], f["level_end"], f["slope_per_10k"])
        rows.append((name, *map(str, levels), "yes" if f["flat"] else "NO"))
    q = r["requests"]
    rate = q["total"] / q["elapsed_s"] if q["elapsed_s"] else 0.0
    return "\n".join(
        [
            text_table(rows, right_from=1),
            f"requests: {q['total']} in {q['elapsed_s']} s ({rate:.1f}/s), "
            f"{q['sessions']} sessions, by status {q['by_status']}",
            f"integrity: {r['integrity']}; CPU: {r['cpu']['model']}",
            f"verdict: {'ok' if r['ok'] else 'FAILED'}",
        ]
    )


def plot(r: dict[str, Any], path: Path) -> None:
    """One panel per series against requests finished; the end of warm-up dashed."""
    plt = pyplot()
    names = list(r["slopes"])
    rows = -(-len(names) // PLOT_COLUMNS)
    fig, axes = plt.subplots(rows, PLOT_COLUMNS, figsize=(12, 2.6 * rows), squeeze=False)
    xs = [s["requests"] for s in r["samples"]]
    warmup = r["config"]["warmup_share"] * r["config"]["requests"]
    for ax, name in zip(axes.flat, names):
        ax.plot(xs, [s[name] for s in r["samples"]], lw=1)
        ax.axvline(warmup, ls="--", c="grey", lw=0.8)
        verdict = "flat" if r["slopes"][name]["flat"] else "NOT flat"
        ax.set_title(f"{name} ({verdict})", fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.supxlabel("requests finished")
    save_figure(fig, path, dpi=110)


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import add_config_args, parser

    ap = parser("penelope bench soak", __doc__)
    add_config_args(ap, SoakConfig)
    ap.add_argument("--json", metavar="OUT", help="write the result as JSON to this file")
    ap.add_argument("--plot", metavar="PNG", help="plot every series to this PNG file")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    out, png = args.pop("json"), args.pop("plot")
    result = run_soak(SoakConfig(**args))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1))
    if png:
        plot(result, Path(png))
    print(table(result), file=sys.stdout)
    return 0 if result["ok"] else 1
