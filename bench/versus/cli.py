"""`penelope bench versus`: an agent-trace replay over HTTP against OpenAI-compatible servers.

    penelope bench versus --peers vllm,llama --kv-tokens 12416 --load 0.5,0.9,1.2 --seeds 0,1,2
    penelope bench versus --server penelope=http://127.0.0.1:8001 \\
        --server vllm=http://127.0.0.1:8002 [--start NAME=CMD ...] [--kv-tokens 8192,4096]

Replays the Claude Code sessions of data/traces (lengths x 1/S, tool gaps
x 1/G and capped, Poisson starts; a session ends at its first request past
`--window-tokens`) as `/v1/completions` requests over token ids, streamed
with usage, against each server alone, the order flipping per seed
(`bench.versus.runs`). `--start NAME=CMD` starts that server cold for every
run and stops it after; CMD may name {port}, {kv_tokens} and {kv_blocks}
(`--kv-tokens` sweeps the capacity). `--peers` starts the named servers as their
users run them, and Penelope as it ships, from the project's scripts
(`bench.versus.peers`); each run records the server's version and command.
`--load 0.5,0.9,1.2` times each server's cold prefill first and scales session
starts and tool gaps so that the offered prefill work is that multiple of the
fastest one's rate (`bench.versus.load`; `--service-tok-s` gives the rate instead).
Each run reads back the KV capacity the server really got and times a cold
`--raw-prompt-tokens` prefill beside the replay. JSON: per request TTFT, E2E,
prompt and cached tokens; per run mean, p50, p90 TTFT and E2E, hit ratio, wall
time, errors, the server's version and command; ratios to `--baseline` per seed;
the CPU. Also a table (stdout) and a plot (TTFT CDF, TTFT per turn).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.versus.config import REGIMES, ServerSpec, VersusConfig


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x)


# The workload and run options, one VersusConfig field each (its default): name, type, help.
WORKLOAD_OPTIONS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("trace", Path, "Claude Code trace"),
    ("sessions", int, "sessions per seed"),
    ("seeds", _ints, "comma list of seeds"),
    ("length_divisor", float, "S: trace lengths x 1/S"),
    ("time_divisor", float, "G: tool gaps x 1/G"),
    ("max_gap_s", float, "scaled gaps cap"),
    ("mean_interarrival_s", float, "mean gap between Poisson session starts"),
    ("window_tokens", int, "a session ends at its first request past this"),
    ("max_turns", int, "turns per session"),
    ("max_output_tokens", int, "each turn's output cap"),
    ("kv_tokens", _ints, "comma list of KV capacities to sweep (needs --start for each server)"),
    ("loads", _floats, "comma list of offered loads, x the fastest server's measured prefill "
     "rate (starts and gaps scaled to it; bench.versus.load)"),
    ("service_tok_s", float, "the service rate --load multiplies (0: timed on each server first)"),
    ("block_tokens", int, "tokens per KV block / page ({kv_blocks} = kv_tokens / this)"),
    ("raw_prompt_tokens", int, "the cold prefill of the raw-speed figure"),
    ("raw_repeats", int, "cold prefills per run"),
    ("request_timeout_s", float, "each request must finish within this"),
    ("startup_timeout_s", float, "a server must answer /health within this"),
)  # fmt: skip


def add_server_options(ap: argparse.ArgumentParser) -> None:
    """`--server NAME=URL` and `--start NAME=CMD` (repeat): the servers given by hand."""
    ap.add_argument("--server", type=_pair, action="append", default=[], metavar="NAME=URL",
                    help="a server to replay against (repeat)")  # fmt: skip
    ap.add_argument("--start", type=_pair, action="append", default=[], metavar="NAME=CMD",
                    help="shell command that starts server NAME ({port}, {kv_tokens}, "
                    "{kv_blocks})")  # fmt: skip


def given_servers(args: argparse.Namespace) -> tuple[ServerSpec, ...]:
    """The `--server`s, each with its `--start` command if one names it."""
    starts = dict(args.start)
    unknown = set(starts) - {n for n, _ in args.server}
    if unknown:
        raise SystemExit(f"--start names no --server: {sorted(unknown)}")
    return tuple(ServerSpec(n, u, starts.get(n, "")) for n, u in args.server)


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import parser

    d = VersusConfig((ServerSpec("x", "http://x"),))
    ap = parser("penelope bench versus", __doc__)
    add_server_options(ap)
    ap.add_argument(
        "--peers",
        type=lambda t: [x for x in t.split(",") if x],
        default=[],
        help="comma list of servers to start as their users run them (bench.versus.peers: "
        "vllm, vllm-float32, llama, llama-default, llama-q8_0), with Penelope as it ships "
        "unless --server names penelope",
    )
    ap.add_argument("--baseline", default="", help="ratios are to this server (default: the last)")
    ap.add_argument(
        "--regime",
        choices=sorted(REGIMES),
        default=None,
        help="the workload's options as that regime sets them (`config.REGIMES`); an option "
        "given as well overrides it",
    )
    for name, kind, help_ in WORKLOAD_OPTIONS:
        flag = "--load" if name == "loads" else f"--{name.replace('_', '-')}"
        ap.add_argument(flag, dest=name, type=kind, default=getattr(d, name), help=help_)
    ap.add_argument("--out-dir", type=Path, default=d.out_dir, help="logs, JSON and plot go here")
    ap.add_argument("--json", type=Path, default=None, help="JSON (default: OUT_DIR/versus.json)")
    ap.add_argument("--plot", type=Path, default=None, help="PNG (default: OUT_DIR/versus.png)")
    ap.add_argument("--no-records", action="store_true", help="no per-request records in the JSON")
    return ap  # fmt: skip


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The options, a `--regime`'s workload as the defaults of the options it names."""
    ap = build_parser()
    regime = ap.parse_known_args(argv)[0].regime
    if regime is not None:
        ap.set_defaults(**REGIMES[regime])
    return ap.parse_args(argv)


def config_from(args: argparse.Namespace) -> VersusConfig:
    from bench.net import free_port
    from bench.versus.peers import peer_specs

    given = given_servers(args)
    names = [s.name for s in given]
    if not given and not args.peers:
        raise SystemExit("name the servers: --peers NAMES, or --server NAME=URL (repeat)")
    started = peer_specs(args.peers, "penelope" not in names, free_port) if args.peers else ()
    fields = {f.name for f in dataclasses.fields(VersusConfig)} - {"servers"}
    return VersusConfig(
        servers=given + started, **{k: v for k, v in vars(args).items() if k in fields}
    )


def document(
    cfg: VersusConfig,
    baseline: str,
    runs: list[dict[str, Any]],
    plans: list,
    failed: list[dict[str, Any]] | None = None,
) -> dict:
    from bench.sampler import cpu_info
    from bench.versus import targets
    from bench.versus.report import grouped, ratios
    from bench.versus.turns import versus_turns

    rats = ratios(runs, baseline)
    raw: dict[str, list[float]] = {}
    for r in runs:
        if r["raw_prefill"]["ttft_s"] is not None:
            raw.setdefault(r["server"], []).append(r["raw_prefill"]["ttft_s"])
    conf = dataclasses.asdict(cfg)
    return {
        "bench": "versus",
        "config": json.loads(json.dumps(conf, default=str)),
        "baseline": baseline,
        "cpu": cpu_info(),
        "load_avg_at_end": os.getloadavg(),  # each run records its own too
        "plans": plans,
        "raw_prefill_ttft_s": {k: statistics.median(v) for k, v in raw.items()},
        "rows": grouped(runs, rats),
        "ratios": rats,
        "turns": versus_turns(runs, baseline),
        "targets": targets.check(grouped(runs, rats)),
        "runs": runs,
        "failed": failed or [],
    }


def main(argv: list[str] | None = None) -> int:
    from bench.versus import targets
    from bench.versus.report import plot, table
    from bench.versus.runs import run_all
    from bench.versus.turns import turns_table

    args = parse(argv)
    cfg = config_from(args)
    # ratios are Penelope's to the first peer named, else to the last server
    peer = next((s.name for s in cfg.servers if s.name in args.peers), cfg.servers[-1].name)
    baseline = args.baseline or peer
    if baseline not in {s.name for s in cfg.servers}:
        raise SystemExit(f"--baseline {baseline!r} names no --server")
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    runs, failed, plans = run_all(cfg)
    doc = document(cfg, baseline, runs, plans, failed)
    print(table(doc["rows"], doc["raw_prefill_ttft_s"]))
    print(turns_table(runs, doc["turns"]))
    if doc["targets"]:
        print(targets.table(doc["targets"]))
    out = args.json or cfg.out_dir / "versus.json"
    title = f"{cfg.sessions} sessions, seeds {list(cfg.seeds)}, S={cfg.length_divisor:g}"
    png = plot(args.plot or cfg.out_dir / "versus.png", runs, title)
    if args.no_records:
        for r in doc["runs"]:
            r.pop("records")
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out} and {png}")
    for f in failed:
        print(f"did not run: {f['server']} at kv {f['kv_tokens']} seed {f['seed']}: "
              f"{f['error'].splitlines()[0]}")  # fmt: skip
    return 0 if not failed and not any(r["summary"]["errors"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
