"""`penelope bench cluster`: the Ray Serve app on a real two-node cluster, faults and all.

    penelope bench cluster [--sessions 4] [--store path|s3] [--json OUT]

Starts a two-node Ray cluster on this machine (`bench.cluster.nodes`: a head and
a worker, each with one engine slot, so the two engine replicas land one per
node), `serve deploy`s `serve_config.yaml` adapted to it (`bench.cluster.config`:
tiny Qwen3, one shared store: a directory or, with `--store s3`, a bucket on a
local S3 server; API keys for the tenants), runs every
planned session once under the `reference` tenant, then the three cases of
`bench.cluster.cases` under the `agents` tenant (a replica killed, the worker
node lost and rejoined, the fleet scaled down) and the autoscaling ramp of
`bench.cluster.autoscale`. Everything is torn down on the way out, on an error,
Ctrl-C or SIGTERM too. Exit status 0 only if every case and the ramp are ok.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.cluster.app import terminate
from bench.cluster.config import ClusterConfig


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import add_config_args, parser

    ap = parser("penelope bench cluster", __doc__)
    add_config_args(ap, ClusterConfig)
    ap.add_argument("--json", metavar="OUT", help="write the result as JSON to OUT ('-': stdout)")
    return ap


def _guarded(what: str, step: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A case's entry, or its error (the next case still runs; teardown is the caller's)."""
    print(f"cluster: {what} ...", file=sys.stderr, flush=True)
    try:
        return step()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "ok": False}


def table(result: dict[str, Any]) -> str:
    cols = ("moved_sessions", "store_tokens", "identical", "server_errors", "ok")
    lines = ["case          " + "  ".join(cols)]
    for case in ("replica_kill", "node_loss", "downscale"):
        e = result.get(case) or {}
        cells = [str(e.get(c, "-")) for c in cols]
        lines.append(f"{case:<14}" + "  ".join(v.ljust(len(c)) for v, c in zip(cells, cols)))
        if "error" in e:
            lines.append(f"  {e['error']}")
        for u in e.get("undrained", []):
            lines.append(f"  not drained: {u['session']} ({u['why']})")
    a = result.get("autoscale") or {}
    lines.append(
        f"autoscale: max {a.get('max_replicas_seen')} replicas, "
        f"scaled down {a.get('scaled_down')}, "
        f"drained {a.get('drained_pages')} pages, signal {a.get('signal')}, "
        f"{a.get('ramp_sessions')} slots"
        + (f" (calibrated: {c['service_s']} s a request)" if (c := a.get("calibration")) else "")
        + (f" ({a['error']})" if "error" in a else "")
    )
    lines.append(f"nodes {len(result.get('nodes', []))}, replicas by node "
                 f"{result.get('replicas_by_node')}, ok {result.get('ok')}")  # fmt: skip
    return "\n".join(lines)


def run_cluster(cfg: ClusterConfig) -> dict[str, Any]:
    """The whole bench; Ray's chatter on stderr."""
    from bench.cluster.bench import run

    logging.getLogger("httpx").setLevel(logging.WARNING)
    t0 = time.monotonic()
    with contextlib.redirect_stdout(sys.stderr):
        try:
            result = run(cfg, _guarded)
        except Exception as exc:  # the cluster did not start, or broke past the cases' guards
            result = {"bench": "cluster", "error": f"{type(exc).__name__}: {exc}", "ok": False}
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    out = args.pop("json")
    try:
        cfg = ClusterConfig(**args)
    except ValueError as exc:
        print(f"penelope bench cluster: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, terminate)  # unwinds through the cluster's teardown
    result = run_cluster(cfg)
    text = json.dumps(result, indent=1)
    if out == "-":
        print(text)
    elif out:
        with open(out, "w") as f:
            f.write(text + "\n")
    print(table(result), file=sys.stderr if out == "-" else sys.stdout)
    return 0 if result["ok"] else 1
