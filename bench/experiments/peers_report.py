"""Results of `penelope bench peers`: per set-up rows, the best peer, ratios, table, plot.

A run (one set-up over several seeds) keeps each metric as the mean over
seeds and every seed's value under `per_seed`, so ratios to the best peer
are taken seed by seed (same sessions, same arrivals). `merge` joins runs of
the same set-ups over different seeds (`--seed-base`), e.g. to go from 3
seeds to 6, or different set-ups over the same seeds (`--setups`)::

    python -m bench.experiments.peers_report a.json b.json --json both.json --plot both.png
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bench.report import pyplot, save_figure, spread
from bench.sim.cliargs import comma_list
from bench.sim.setups import Setup
from penelope_cli.helpformat import parser

LOWER = ("mean_ttft_s", "p90_ttft_s", "mean_queue_s", "mean_llm_time_s", "mean_jct_s")
HIGHER = ("turns_per_hour_per_replica",)
FLOORS = ("mean_ttft_floor_s", "mean_llm_floor_s")
METRICS = LOWER + HIGHER + FLOORS + ("hit_ratio", "recompute_ratio")


def describe(setup: Setup) -> dict[str, Any]:
    return {
        "name": setup.name,
        "system": setup.system,
        "router": setup.router,
        "cache": setup.cache,
        "levers": setup.levers,
        "tuned": setup.tuned,
    }


def summarize(about: dict[str, Any], per_seed: list[dict[str, float]]) -> dict[str, Any]:
    """One run: `about` (describe) plus each metric's mean over seeds and `per_seed`."""
    run = dict(about)
    for k in per_seed[0]:
        run[k] = float(np.mean([p[k] for p in per_seed]))
    run["per_seed"] = {k: [p[k] for p in per_seed] for k in per_seed[0]}
    return run


def best_peer(runs: list[dict[str, Any]], tuned: bool = False) -> dict[str, dict[str, Any]]:
    """Per metric, the best peer run: at the peers' defaults, or also the tuned ones."""
    peers = [r for r in runs if r["system"] != "penelope" and (tuned or not r.get("tuned"))]
    out = {}
    for k in LOWER + HIGHER:
        pick = (max if k in HIGHER else min)(peers, key=lambda r: r[k])
        out[k] = {"setup": pick["name"], "value": pick[k]}
    return out


def vs_best_peer(runs: list[dict[str, Any]], best: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each Penelope set-up's per-seed ratio to the best peer of each metric."""
    by_name = {r["name"]: r for r in runs}
    out: dict[str, Any] = {}
    for r in runs:
        if r["system"] != "penelope":
            continue
        row = {}
        for k, b in best.items():
            ratio = np.asarray(r["per_seed"][k]) / np.maximum(
                by_name[b["setup"]]["per_seed"][k], 1e-12
            )
            row[k] = spread(ratio)
        out[r["name"]] = row
    return out


def table(runs: list[dict[str, Any]], vs: dict[str, Any]) -> str:
    cols = (
        "mean_ttft_s",
        "mean_ttft_floor_s",
        "p90_ttft_s",
        "mean_queue_s",
        "mean_llm_time_s",
        "mean_llm_floor_s",
        "mean_jct_s",
        "turns_per_hour_per_replica",
        "hit_ratio",
    )
    head = [
        "set-up",
        "ttft",
        "ttft floor",
        "p90",
        "queue",
        "llm",
        "floor",
        "jct",
        "turns/h/rep",
        "hit",
        "ttft/best",
        "llm/best",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(runs, key=lambda r: r["mean_ttft_s"]):
        v = vs.get(r["name"])
        extra = (
            [
                f"{v[k]['mean']:.2f} [{v[k]['min']:.2f}-{v[k]['max']:.2f}]"
                for k in ("mean_ttft_s", "mean_llm_time_s")
            ]
            if v
            else ["", ""]
        )
        vals = [f"{r[c]:.4g}" if c in r else "" for c in cols]  # older files lack a floor
        lines.append("| " + " | ".join([r["name"]] + vals + extra) + " |")
    return "\n".join(lines)


def plot(path: Path, runs: list[dict[str, Any]], title: str) -> Path:
    plt = pyplot()
    runs = sorted(runs, key=lambda r: r["mean_ttft_s"])
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(runs) + 1.5))
    y = np.arange(len(runs))
    vals = [r["mean_ttft_s"] for r in runs]
    lo = [v - min(r["per_seed"]["mean_ttft_s"]) for v, r in zip(vals, runs)]
    hi = [max(r["per_seed"]["mean_ttft_s"]) - v for v, r in zip(vals, runs)]
    colors = ["tab:red" if r["system"] == "penelope" else "tab:gray" for r in runs]
    ax.barh(y, vals, xerr=[lo, hi], color=colors)
    ax.set_yticks(y, [r["name"] for r in runs], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean TTFT, s (bars: min-max over seeds)")
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


def document(config: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """`best_peer` over the peers at their defaults; with tuned peers in the run, also
    `best_tuned_peer` over every peer run and Penelope's ratios to it."""
    best = (
        best_peer(runs)
        if any(r["system"] != "penelope" and not r.get("tuned") for r in runs)
        else {}
    )
    doc = {
        "config": config,
        "runs": runs,
        "best_peer": best,
        "vs_best_peer": vs_best_peer(runs, best) if best else {},
    }
    if any(r.get("tuned") for r in runs):
        tuned = best_peer(runs, tuned=True)
        doc["best_tuned_peer"] = tuned
        doc["vs_best_tuned_peer"] = vs_best_peer(runs, tuned)
    return doc


def merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The same set-ups (in any order) over the seeds of every document; or, where the
    documents ran the same seeds, every document's set-ups side by side. Metrics some
    document lacks (an older file) are left out."""
    names = [r["name"] for r in docs[0]["runs"]]
    if any(sorted(r["name"] for r in d["runs"]) != sorted(names) for d in docs[1:]):
        return _side_by_side(docs)
    by_name = [{r["name"]: r for r in d["runs"]} for d in docs]
    runs = []
    for name in names:
        mine = [b[name] for b in by_name]
        keys = [k for k in mine[0]["per_seed"] if all(k in r["per_seed"] for r in mine)]
        per_seed = [
            {k: r["per_seed"][k][j] for k in keys}
            for r in mine
            for j in range(len(r["per_seed"]["mean_ttft_s"]))
        ]
        about = {k: mine[0][k] for k in ("name", "system", "router", "cache", "levers")}
        about["tuned"] = mine[0].get("tuned", False)
        runs.append(summarize(about, per_seed))
    config = dict(docs[0]["config"])
    for key in ("dropped_turns", "turns"):
        config[key] = {s: n for d in docs for s, n in d["config"][key].items()}
    config["seeds"] = len(config["turns"])
    return document(config, runs)


def select(doc: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The document with only the named set-ups (best peer and ratios taken again)."""
    missing = set(names) - {r["name"] for r in doc["runs"]}
    if missing:
        raise ValueError(f"set-ups {sorted(missing)} are not in the document")
    return document(doc["config"], [r for r in doc["runs"] if r["name"] in names])


def _side_by_side(docs: list[dict[str, Any]]) -> dict[str, Any]:
    seeds = docs[0]["config"]["turns"]
    names = [r["name"] for d in docs for r in d["runs"]]
    if any(d["config"]["turns"] != seeds for d in docs[1:]) or len(set(names)) < len(names):
        raise ValueError(
            "to merge, the documents must run the same set-ups (over any seeds) "
            "or different set-ups over the same seeds"
        )
    return document(dict(docs[0]["config"]), [r for d in docs for r in d["runs"]])


def main(argv: list[str] | None = None) -> int:
    ap = parser("python -m bench.experiments.peers_report", __doc__)
    ap.add_argument("files", type=Path, nargs="+", help="bench peers --json files")
    ap.add_argument(
        "--only", type=comma_list(str), default=None, help="keep these set-ups of each file"
    )
    ap.add_argument(
        "--rename",
        type=comma_list(str),
        default=[],
        help="OLD=NEW,...: rename set-ups of each file (after --only)",
    )
    ap.add_argument("--json", type=Path, default=None, help="write the merged results here")
    ap.add_argument("--plot", type=Path, default=None, help="PNG of mean TTFT per set-up")
    args = ap.parse_args(argv)
    docs = [json.loads(p.read_text()) for p in args.files]
    if args.only:
        docs = [select(d, args.only) for d in docs]
    pairs = [r.split("=", 1) for r in args.rename]
    if any(len(p) != 2 for p in pairs):
        ap.error("--rename takes OLD=NEW pairs")
    for d in docs:
        for r in d["runs"]:
            r["name"] = dict(pairs).get(r["name"], r["name"])
    doc = merge(docs)
    print(table(doc["runs"], doc["vs_best_peer"]))
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=1))
    if args.plot is not None:
        c = doc["config"]
        title = f"{c['lengths']} lengths, {c['sessions']} sessions, {c['replicas']} replicas, "
        plot(args.plot, doc["runs"], title + f"{c['seeds']} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
