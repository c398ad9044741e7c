"""`penelope bench faults`: faults of the store and of clients, under agent load, nothing lost.

    penelope bench faults [--concurrency 64] [--short] [--cases a,b] [--json OUT]

Starts moto's S3 server and `bench.faults.proxy.FaultProxy` in front of it,
then for the baseline and each case a fresh `penelope serve` (tiny Qwen3)
whose store is a new bucket reached through the proxy. Each case runs the
same seeded multi-turn sessions from data/traces (`--concurrency` at once)
with its fault from `--before-s` on (`bench.faults.cases`), and is held
against the baseline (`bench.faults.bench`). `--short` is the test-sized
form (4 sessions, seconds-long faults). Exit status 0 when every case holds.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bench.faults.bench import run_bench
from bench.faults.cases import CASES
from bench.faults.config import FaultsConfig, short
from bench.report import text_table


def table(r: dict[str, Any]) -> str:
    head = ("case", "turns", "5xx", "lost/hung", "differ/compared", "TTFT p50/p99 before",
            "during", "after", "queue max/cap MiB", "RSS x", "resume s", "ok")  # fmt: skip
    rows = [head]
    for c in r["cases"]:
        t = c["ttft"]
        ph = [f"{t[p]['p50_s']}/{t[p]['p99_s']}" for p in ("before", "during", "after")]
        rows.append((
            c["case"], str(c["turns"]), str(c["server_5xx"]), f"{c['failed']}/{c['hung']}",
            f"{c['differ']}/{c['compared']}", *ph,
            f"{c['queue_max_bytes'] / 2**20:.1f}/{c['queue_cap_bytes'] / 2**20:.0f}",
            str(c["rss_vs_baseline"]), str(c["store_writes_resume_s"]),
            "ok" if c["ok"] else "FAILED " + ",".join(k for k, v in c["checks"].items() if not v),
        ))  # fmt: skip
    return text_table(rows, sep=" | ")


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import add_config_args, parser

    ap = parser("penelope bench faults", __doc__)
    add_config_args(ap, FaultsConfig)
    ap.add_argument("--short", action="store_true", help="the test-sized form")
    ap.add_argument("--json", metavar="OUT", default=None, help="write the result here")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    out, is_short = args.pop("json"), args.pop("short")
    names = tuple(n for n in args.pop("cases").split(",") if n) or tuple(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; the cases are {sorted(CASES)}")
    cfg = FaultsConfig(cases=names, **args)
    result = run_bench(short(cfg) if is_short else cfg, names)
    result["command"] = "penelope bench faults " + " ".join(argv or sys.argv[1:])
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1, default=str)
    print(table(result))
    return 0 if result["ok"] else 1
