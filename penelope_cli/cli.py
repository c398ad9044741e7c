"""The `penelope` command: one entry point that dispatches to each tool.

    penelope demo                 a three-turn agent session on the embedded engine
    penelope serve                the OpenAI-compatible server in one process
    penelope verify               exactness: fused recompute, engine turns, a reference
    penelope bench NAME           replay | simulate | load | soak | agree | peers | capacity
                                  | speed | copies | steps | versus | export-trace | aiperf
                                  | cluster | claude-code | codex | faults

Subcommands import their module only when run, so `penelope verify` does not
pay for FastAPI and `penelope serve` does not import the benchmarks. The
top-level parser holds one stub per tool (its name and one-line help); each
tool's module builds its own options with `build_parser()` (`tool_parser`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from penelope_cli.helpformat import parser

# name: (module with build_parser() and main(), one-line help)
COMMANDS = {
    "demo": ("penelope_cli.demo", "a three-turn agent session on the embedded engine"),
    "serve": ("penelope_cli.serve", "the OpenAI-compatible server in one process"),
    "verify": ("penelope_cli.verify", "exactness: fused recompute, engine turns, a reference"),
}
BENCHES = {
    "replay": ("bench.replay.cli", "agent traces through the real engine, every policy"),
    "simulate": ("bench.sim.simulate", "agent traces on simulated Qwen3 replicas, every lever"),
    "load": ("bench.load.cli", "many concurrent agent sessions against the standalone server"),
    "soak": ("bench.soak.cli", "100K short requests to the standalone server: flat state"),
    "agree": ("bench.sim.agree", "the real engine and the simulator, request by request"),
    "peers": ("bench.experiments.peers", "Penelope against the best peer set-ups, both lengths"),
    "capacity": (
        "bench.experiments.capacity",
        "agent sessions a fleet holds within a TTFT SLO",
    ),
    "speed": ("bench.speed.cli", "the embedded engine's speed, alone or against another server"),
    "copies": ("bench.speed.copies", "KV copies between the tiers against the simulator's charge"),
    "steps": ("bench.speed.steps", "the engine's steps against the GPU roofline (CUDA)"),
    "versus": ("bench.versus.cli", "agent traces over HTTP against real servers, side by side"),
    "export-trace": ("bench.aiperf.export_cli", "our agent sessions as aiperf trace files"),
    "aiperf": ("bench.aiperf.cli", "NVIDIA's aiperf client replays agent sessions, per server"),
    "cluster": ("bench.cluster.cli", "the Ray app on two nodes here: faults and autoscaling"),
    "claude-code": ("bench.claude_code.cli", "the Claude Code CLI against penelope serve, twice"),
    "codex": ("bench.codex.cli", "the Codex CLI against penelope serve, twice"),
    "faults": ("bench.faults.cli", "store and client faults under agent load, nothing lost"),
}


def build_parser() -> argparse.ArgumentParser:
    """`penelope` and `penelope bench`: a stub per tool that passes its arguments on."""
    ap = parser("penelope", __doc__, epilog="`penelope COMMAND --help` shows its options.")
    commands = ap.add_subparsers(
        dest="command", metavar="COMMAND", required=True, help="the tool to run"
    )
    for name, (_, line) in COMMANDS.items():
        commands.add_parser(name, help=line, description=line, add_help=False)
    bench = commands.add_parser(
        "bench",
        help="the benchmarks (`penelope bench --help` lists them)",
        description="The benchmarks; `penelope bench NAME --help` shows one's options.",
        formatter_class=ap.formatter_class,
    )
    names = bench.add_subparsers(
        dest="bench", metavar="NAME", required=True, help="the benchmark to run"
    )
    for name, (_, line) in BENCHES.items():
        names.add_parser(name, help=line, description=line, add_help=False)
    return ap


def _module(path: tuple[str, ...]) -> ModuleType:
    name = BENCHES[path[1]][0] if path[0] == "bench" else COMMANDS[path[0]][0]
    return importlib.import_module(name)


def tool_parser(*path: str) -> argparse.ArgumentParser:
    """The full parser of `penelope PATH...`, e.g. ("bench", "load"); imports the tool."""
    return _module(path).build_parser()


def _run(path: tuple[str, ...], argv: list[str]) -> int:
    if path == ("serve",):
        from penelope_cli.serve import main as serve

        return int(serve(tool_parser("serve").parse_args(argv)) or 0)
    return int(_module(path).main(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    if not argv:
        ap.print_help()
        return 2
    try:
        ns, _ = ap.parse_known_args(argv)
        path = (ns.command, ns.bench) if ns.command == "bench" else (ns.command,)
        if tuple(argv[: len(path)]) != path:  # e.g. `penelope --x verify`
            ap.error(f"unrecognized arguments before {' '.join(path)!r}")
    except SystemExit as stop:  # --help (0) or a usage error (2), already printed
        return int(stop.code or 0)
    return _run(path, argv[len(path) :])


if __name__ == "__main__":
    raise SystemExit(main())
