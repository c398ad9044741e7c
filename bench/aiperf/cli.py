"""`penelope bench aiperf`: NVIDIA's aiperf replays agent sessions against each server.

    penelope bench aiperf --peer penelope --peer vllm-float32 [--workload exported,synth] \\
        [--regime busy] [--server NAME=URL [--start NAME=CMD]] [--out-dir aiperf-out]

Two workloads, each replayed by `aiperf profile` (`bench.aiperf.profile`:
chat endpoint, streamed, on the trace's own schedule) against every server in
turn, each started cold by its command and stopped after (`bench.versus.servers`):

* `exported`: the sessions `penelope bench versus` replays, with its workload
  options (`--regime`, `--sessions`, ...), exported by `bench.aiperf.export`;
* `synth`: aiperf's own `synthesize agentic-code` sessions, scaled to this CPU
  (`bench.aiperf.synth` states the scale-down: lengths / 32, gaps / 4, prompts up
  to 4,000 tokens, 16 sessions by default).

A server is `--server NAME=URL` (already up, or started by `--start NAME=CMD`
over {port}, {kv_tokens}, {kv_blocks}) or `--peer NAME`, started on a free
port: `penelope` (`penelope serve`, the bundled SmolLM2-135M, {kv_tokens} of KV,
no host tier, no disk store) or a `bench speed` peer (`bench.speed.peers`: llama-f32,
llama-q8_0, vllm-float32, vllm-bfloat16, built by their scripts). aiperf runs
in its own venv (`make aiperf`). JSON (OUT_DIR/aiperf.json): every run's figures
as aiperf reports them, its command line, and the ratios to `--baseline` (default:
the last server). The process exits 1 if any request failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.aiperf.export_cli import add_workload_options, export, export_config, parse_with_regime
from bench.aiperf.synth import SynthConfig
from bench.versus.cli import add_server_options, given_servers
from bench.versus.config import ServerSpec

WORKLOADS = ("exported", "synth")
ROOT = Path(__file__).resolve().parents[2]
# No host tier and no disk store: `penelope serve`'s default store
# (~/.cache/penelope/store) outlives the process, and a "cold" server would read the
# previous run's pages from it.
PENELOPE = (f"cd {ROOT} && OMP_NUM_THREADS=1 {sys.executable} -m penelope_cli.cli serve "
            "--model smollm2-135m --port {port} --device-pages {kv_blocks} --host-pages 0 "
            "--store-uri none --log-level warning")  # fmt: skip


def _workloads(text: str) -> tuple[str, ...]:
    names = tuple(x for x in text.split(",") if x)
    if not names or set(names) - set(WORKLOADS):
        raise argparse.ArgumentTypeError(f"workloads are a comma list of {WORKLOADS}")
    return names


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import parser

    s = SynthConfig()
    ap = parser("penelope bench aiperf", __doc__)
    add_server_options(ap)
    ap.add_argument(
        "--peer",
        action="append",
        default=[],
        help="penelope, or a bench speed peer, started on a free port (repeat)",
    )
    ap.add_argument("--baseline", default="", help="ratios are to this server (default: the last)")
    ap.add_argument("--model", default="smollm2-135m", help="the model name the servers serve")
    ap.add_argument("--workload", type=_workloads, default=WORKLOADS, help="exported,synth")
    add_workload_options(ap)
    ap.add_argument(
        "--synth-sessions", type=int, default=s.sessions, help="aiperf's synthesised sessions"
    )
    ap.add_argument(
        "--synth-length-divisor",
        type=float,
        default=s.length_divisor,
        help="aiperf's token figures x 1/this",
    )
    ap.add_argument(
        "--synth-time-divisor", type=float, default=s.time_divisor, help="aiperf's gaps x 1/this"
    )
    ap.add_argument(
        "--synth-max-isl", type=int, default=s.max_isl, help="the longest synthesised prompt"
    )
    ap.add_argument(
        "--synth-max-turns",
        type=int,
        default=s.max_turns,
        help="each synthesised session's first turns (0: all)",
    )
    ap.add_argument("--kv-tokens", type=int, default=12416, help="{kv_tokens} of --start commands")
    ap.add_argument("--block-tokens", type=int, default=16, help="{kv_blocks} = kv_tokens / this")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="each aiperf run's deadline")
    ap.add_argument("--startup-timeout-s", type=float, default=600.0, help="a server's deadline")
    ap.add_argument("--out-dir", type=Path, default=Path("aiperf-out"), help="JSON, logs, files")
    return ap  # fmt: skip


def servers(args: argparse.Namespace) -> list[ServerSpec]:
    """--server (with its --start) and --peer, in the order given (peers last)."""
    from bench.net import free_port
    from bench.speed.peers import SPEED_PEERS

    out = list(given_servers(args))
    for name in args.peer:
        port = free_port()
        # a bench speed peer's command over {port} and {batch} (llama-server's slots: 4)
        cmd = (
            PENELOPE
            if name == "penelope"
            else f"cd {ROOT} && " + SPEED_PEERS[name].command.replace("{batch}", "4")
        )
        out.append(ServerSpec(name, f"http://127.0.0.1:{port}", cmd))
    if not out:
        raise SystemExit("name a server: --server NAME=URL or --peer NAME")
    return out


def prepare(args: argparse.Namespace) -> dict[str, tuple[Path, int]]:
    """Each workload's trace file and block size."""
    from bench.aiperf.synth import synthesize

    files = {}
    if "exported" in args.workload:
        doc = export(export_config(args, args.out_dir / "exported"))
        files["exported"] = (Path(doc["files"]["sessions"]), args.block)
    if "synth" in args.workload:
        cfg = SynthConfig(args.synth_sessions, args.synth_length_divisor,
                          args.synth_time_divisor, args.synth_max_isl, args.synth_max_turns,
                          args.seed)  # fmt: skip
        files["synth"] = synthesize(cfg, args.out_dir / "synth")
    return files


def run(args: argparse.Namespace, specs: list[ServerSpec]) -> list[dict[str, Any]]:
    """Every workload against every server, each server cold and alone."""
    from bench.aiperf.profile import ProfileSpec, profile
    from bench.versus.servers import running

    runs = []
    for workload, (trace, block) in prepare(args).items():
        for spec in specs:
            where = args.out_dir / workload / spec.name
            where.mkdir(parents=True, exist_ok=True)
            with running(spec, args.kv_tokens, args.block_tokens, where / "server.log",
                         args.startup_timeout_s):  # fmt: skip
                p = ProfileSpec(spec.url, args.model, trace, block, where / "artifacts",
                                args.out_dir / "hf-home", args.timeout_s)  # fmt: skip
                runs.append({"workload": workload, "server": spec.name, **profile(p)})
    return runs


def main(argv: list[str] | None = None) -> int:
    from bench.aiperf.report import ratios, table
    from bench.sampler import cpu_info

    args = parse_with_regime(build_parser(), argv)
    specs = servers(args)
    baseline = args.baseline or specs[-1].name
    if baseline not in {s.name for s in specs}:
        raise SystemExit(f"--baseline {baseline!r} names no server")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    runs = run(args, specs)
    rats = ratios(runs, baseline)
    print(table(runs, rats))
    doc = {"bench": "aiperf", "cpu": cpu_info(), "baseline": baseline,
           "servers": [vars(s) for s in specs], "runs": runs, "ratios": rats,
           "options": {k: str(v) for k, v in vars(args).items()}}  # fmt: skip
    out = args.out_dir / "aiperf.json"
    out.write_text(json.dumps(doc, indent=1, default=str))
    print(f"wrote {out}")
    return 1 if any(r["errors"] or r["cancelled"] for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
