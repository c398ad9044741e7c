"""The ablation table: each lever (policy, tier, router) alone and together, seed by seed.

Reads one or more `bench simulate --json` files run on the same seeds (so
that seed s is the same sessions and arrivals in every file), and writes
Markdown tables:

* every set-up against the baseline (lru, gpu, pow2) at the same replicas and
  device budget: per-seed ratios of mean TTFT, LLM time and JCT, mean and
  [min, max] over seeds;
* each lever alone (switched on over the baseline) and last (switched off
  from the full system), with the best deployable policy (the oracle is
  reported as headroom, never chosen).

    python -m bench.experiments.ablation sim_pow2.json sim_affinity.json \
        --markdown ablation.md --plot a.png

With `--by-sessions`, files of several loads (each with the baseline and some
full-system set-ups, `sessions` read from each file) give one table row per
load and full-system set-up: TTFT and LLM-time ratios and the LLM-time floor.

    python -m bench.experiments.ablation --by-sessions base_64.json full_64.json base_128.json ...
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.sim.report import FLOOR, load_rows, save_figure
from penelope_cli.helpformat import parser

METRICS = (("mean_ttft_s", "TTFT"), ("mean_llm_time_s", "LLM time"), ("mean_jct_s", "JCT"))
Key = tuple[str, str, str]  # policy, tiers, router


def _key(r: dict[str, Any]) -> Key:
    return (r["policy"], r["tiers"], r["router"])


def ratio(a: dict[str, Any], b: dict[str, Any], metric: str) -> tuple[float, float, float]:
    """Per-seed a / b of `metric`: (mean, min, max)."""
    if a.get("seed_list", b.get("seed_list")) != b.get("seed_list", a.get("seed_list")):
        raise ValueError(f"{_key(a)} and {_key(b)} ran on different seeds")
    per = np.array(a["per_seed"][metric]) / np.array(b["per_seed"][metric])
    return float(per.mean()), float(per.min()), float(per.max())


def _fmt(r: tuple[float, float, float]) -> str:
    return f"{r[0]:.2f} [{r[1]:.2f}-{r[2]:.2f}]"


def floor_ratio(
    base: dict[str, Any], rows: Sequence[dict[str, Any]] = ()
) -> tuple[float, float, float] | None:
    """How low any cache could bring LLM time on these seeds, per seed as a ratio to
    the baseline's: (mean, min, max), or None if no row carries the floor.

    The floor is a property of the workload (the same in every set-up on the same
    seeds), so any row of the group that carries it will do.
    """
    source = next((r for r in (base, *rows) if FLOOR in r["per_seed"]), None)
    if source is None:
        return None
    if source.get("seed_list", base.get("seed_list")) != base.get("seed_list"):
        raise ValueError("the floor's row ran on other seeds than the baseline")
    per = np.array(source["per_seed"][FLOOR]) / np.array(base["per_seed"]["mean_llm_time_s"])
    return float(per.mean()), float(per.min()), float(per.max())


def floor_line(base: dict[str, Any], rows: Sequence[dict[str, Any]] = ()) -> str:
    r = floor_ratio(base, rows)
    if r is None:
        return ""
    return (
        f"LLM-time floor: no cache can go below {_fmt(r)} of the baseline's LLM time "
        "(each turn's never-seen tokens prefilled and its output decoded alone).\n\n"
    )


def best_policy(by: dict[Key, dict[str, Any]], tiers: str, router: str) -> str:
    """The deployable policy with the lowest mean TTFT at (tiers, router)."""
    cands = [(r["mean_ttft_s"], k[0]) for k, r in by.items() if k[1:] == (tiers, router)]
    cands = [c for c in cands if c[1] != "oracle"]
    if not cands:
        raise ValueError(f"no runs at tiers={tiers} router={router}")
    return min(cands)[1]


def setups_table(by: dict[Key, dict[str, Any]], base: dict[str, Any]) -> str:
    head = "| policy | tiers | router | mean TTFT s | TTFT ratio | LLM-time ratio | JCT ratio "
    head += "| hit | partial | recompute |\n|---|---|---|---|---|---|---|---|---|---|"
    lines = [head]
    for k, r in sorted(by.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[1]["mean_ttft_s"])):
        cells = [*k, f"{r['mean_ttft_s']:.3g}"]
        cells += [_fmt(ratio(r, base, m)) for m, _ in METRICS]
        cells += [f"{r[x]:.3f}" for x in ("hit_ratio", "partial_return_ratio", "recompute_ratio")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def lever_rows(by: dict[Key, dict[str, Any]], best: str) -> list[tuple[str, Key, Key]]:
    """(lever, with, without): alone over the baseline, and last out of the full system."""
    base, full = ("lru", "gpu", "pow2"), (best, "gpu+cpu", "affinity")
    out = [("full system", full, base)]
    for p in sorted({k[0] for k in by} - {"lru"}):
        out.append((f"policy {p} alone", (p, "gpu", "pow2"), base))
        out.append((f"policy {p} last", (p, "gpu+cpu", "affinity"), ("lru", "gpu+cpu", "affinity")))
        sticky = (p, "gpu", "affinity"), ("lru", "gpu", "affinity")
        out.append((f"policy {p}, sticky routing, GPU only", *sticky))
    out.append(("host tier alone", ("lru", "gpu+cpu", "pow2"), base))
    out.append(("host tier last", full, (best, "gpu", "affinity")))
    out.append(("affinity router alone", ("lru", "gpu", "affinity"), base))
    out.append(("affinity router last", full, (best, "gpu+cpu", "pow2")))
    return [(n, a, b) for n, a, b in out if a in by and b in by]


def levers_table(by: dict[Key, dict[str, Any]], best: str) -> str:
    lines = [
        "| lever | set-up | against | TTFT ratio | LLM-time ratio | JCT ratio |",
        "|---|---|---|---|---|---|",
    ]
    for name, a, b in lever_rows(by, best):
        cells = [name, "/".join(a), "/".join(b)]
        cells += [_fmt(ratio(by[a], by[b], m)) for m, _ in METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _groups(rows: list[dict[str, Any]]) -> dict[tuple[int, int, int], dict[Key, dict[str, Any]]]:
    """Rows by (replicas, device budget, host budget); GPU-only rows join every host budget."""
    hosts: dict[tuple[int, int], set[int]] = {}
    for r in rows:
        own = {r.get("host_budget_tokens", 0)} if r["tiers"] == "gpu+cpu" else set()
        hosts.setdefault((r["replicas"], r["device_budget_tokens"]), set()).update(own)
    groups: dict[tuple[int, int, int], dict[Key, dict[str, Any]]] = {}
    for r in rows:
        rep, dev = r["replicas"], r["device_budget_tokens"]
        mine = [r.get("host_budget_tokens", 0)] if r["tiers"] == "gpu+cpu" else hosts[(rep, dev)]
        for h in sorted(mine) or [0]:
            groups.setdefault((rep, dev, h), {})[_key(r)] = r
    return groups


def report(rows: list[dict[str, Any]]) -> tuple[str, dict[Key, dict[str, Any]], str]:
    """Markdown for every (replicas, device budget, host budget) group of rows."""
    parts, last_by, last_best = [], {}, "lru"
    for (rep, dev, host), by in sorted(_groups(rows).items()):
        base = by.get(("lru", "gpu", "pow2"))
        if base is None:
            continue
        full = any(k[1:] == ("gpu+cpu", "affinity") for k in by)
        best = best_policy(by, "gpu+cpu", "affinity") if full else best_policy(by, "gpu", "pow2")
        parts.append(
            f"### {rep} replicas, device budget {dev} tokens, host budget {host} tokens\n\n"
            f"Every set-up against the baseline (lru, gpu, pow2), per-seed ratio, "
            f"mean [min-max] over {base['seeds']} seeds:\n\n{setups_table(by, base)}\n\n"
            f"{floor_line(base, list(by.values()))}"
            f"Levers (best deployable policy with every lever on: {best}):\n\n"
            f"{levers_table(by, best)}\n"
        )
        last_by, last_best = by, best
    return "\n".join(parts), last_by, last_best


def load_sweep_table(paths: Sequence[Path]) -> str:
    """One row per (sessions, full-system set-up) against that load's baseline."""
    by_load: dict[int, list[Path]] = {}
    for p in paths:
        by_load.setdefault(json.loads(Path(p).read_text())["config"]["sessions"], []).append(p)
    lines = [
        "| sessions | set-up | baseline TTFT s | baseline LLM time s | TTFT ratio "
        "| LLM-time ratio | LLM-time floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, files in sorted(by_load.items()):
        rows, _ = load_rows(files)
        for _, by in sorted(_groups(rows).items()):
            base = by.get(("lru", "gpu", "pow2"))
            if base is None:
                continue
            floor = floor_ratio(base, list(by.values()))
            floor_cell = _fmt(floor) if floor is not None else "-"
            for k, r in sorted(by.items()):
                if k[1:] != ("gpu+cpu", "affinity"):
                    continue
                cells = [str(n), "/".join(k), f"{base['mean_ttft_s']:.3g}"]
                cells += [f"{base['mean_llm_time_s']:.4g}"]
                cells += [_fmt(ratio(r, base, m)) for m, _ in METRICS[:2]]
                lines.append("| " + " | ".join([*cells, floor_cell]) + " |")
    return "\n".join(lines)


def plot_levers(path: Path, by: dict[Key, dict[str, Any]], title: str = "") -> Path:
    """Bars of mean TTFT and LLM time, as ratios to the baseline, with the seeds' spread."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = by[("lru", "gpu", "pow2")]
    keys = sorted(by, key=lambda k: by[k]["mean_ttft_s"], reverse=True)
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(keys) + 1.2))
    y = np.arange(len(keys))
    for off, (metric, label) in zip((-0.2, 0.2), METRICS[:2]):
        rs = np.array([ratio(by[k], base, metric) for k in keys])
        err = np.abs(rs[:, 1:].T - rs[:, 0])
        ax.barh(y + off, rs[:, 0], height=0.4, xerr=err, capsize=2, label=label)
    ax.set_yticks(y, ["/".join(k) for k in keys], fontsize=7)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("ratio to lru/gpu/pow2 (per seed; bars: mean, whiskers: min-max)")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path, dpi=90)


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope bench ablation", __doc__)
    ap.add_argument("files", type=Path, nargs="+", help="`bench simulate --json` files")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the table here")
    ap.add_argument("--plot", type=Path, default=None, help="PNG of ratios to the baseline")
    ap.add_argument("--title", default="", help="title of the plot")
    ap.add_argument(
        "--by-sessions", action="store_true", help="files of several loads: one row per load"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    by: dict[Key, dict[str, Any]] = {}
    if args.by_sessions:
        text = load_sweep_table(args.files)
    else:
        text, by, _ = report(load_rows(args.files)[0])
        if not text:
            print("no baseline (lru, gpu, pow2) among the runs", file=sys.stderr)
            return 1
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text)
    if args.plot is not None and by:
        print(f"wrote {plot_levers(args.plot, by, args.title)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
