"""`penelope bench load`: many concurrent agent sessions against the standalone server.

    penelope bench load [--sessions 200] [--duration-s 120] [--json]

This process serves the OpenAI API (tiny Qwen3, 127.0.0.1, a free port) and
samples its own resident memory; a spawned client process replays Claude Code
sessions from data/traces, each turn a `/v1/completions` request whose
prompt is the turn's token ids (`bench.tokens.TokenMap`). Turns wait their
session's scaled tool time. A share of turns is cancelled mid-stream (the
client disconnects after the first chunk) and a share of extra requests is
malformed. Once the client is done, the engine must be idle with no page
held by a request, no locked tree node and a passing integrity check.

Lengths: the trace's 64-token blocks become one token each (scale 1/64); a
`--length-scale` below that keeps every k-th token of each turn, which keeps
every turn an extension of the previous one.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bench.load.config import LoadConfig
from bench.load.server import run_load
from bench.report import text_table


def table(r: dict[str, Any]) -> str:
    q, p, m = r["requests"], r["pages"], r["memory"]
    rows = [
        ("sessions / duration", f"{r['config']['sessions']} / {r['config']['duration_s']} s"),
        ("requests", str(q["total"])),
        *((f"  status {k}", str(v)) for k, v in q["by_status"].items()),
        ("server errors (5xx)", str(q["server_errors"])),
        ("latency p50 / p99", f"{q['latency_s']['p50']} / {q['latency_s']['p99']} s"),
        ("leaked pages / locked nodes", f"{p['request_pages']} / {p['locked_nodes']}"),
        ("integrity check", p["integrity"]),
        ("RSS after warm-up / end", f"{m['rss_mib_after_warmup']} / {m['rss_mib_end']} MiB"),
        ("RSS peak", f"{m['rss_mib_peak']} MiB"),
        ("hit / recompute ratio", f"{p['hit_ratio']} / {p['recompute_ratio']}"),
        ("verdict", "ok" if r["ok"] else "FAILED"),
    ]
    return text_table(rows)


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import add_config_args, parser

    ap = parser("penelope bench load", __doc__)
    add_config_args(ap, LoadConfig)
    ap.add_argument("--json", action="store_true", help="JSON on stdout, the table on stderr")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    as_json = args.pop("json")
    result = run_load(LoadConfig(**args))
    if as_json:
        print(json.dumps(result))
    print(table(result), file=sys.stderr if as_json else sys.stdout)
    return 0 if result["ok"] else 1
