"""The `penelope` command: one entry point that dispatches to each tool.

    penelope demo                 a three-turn agent session on the embedded engine
    penelope serve                the OpenAI-compatible server in one process
    penelope verify               fused recompute == full prefill on your model
    penelope bench NAME           recompute | cache-ops | store | tiers | replay | simulate
                                  | load | ablation

Subcommands import their module only when run, so `penelope verify` does not
pay for FastAPI and `penelope serve` does not import the benchmarks.
"""

from __future__ import annotations

import argparse
import importlib
import sys

BENCHES = {
    "recompute": "bench.recompute",
    "cache-ops": "bench.cache_ops",
    "store": "bench.store_bench",
    "tiers": "bench.tiers",
    "replay": "bench.replay",
    "simulate": "bench.simulate",
    "load": "bench.load",
    "ablation": "bench.ablation",
}


def _run_module(module: str, argv: list[str]) -> int:
    return int(importlib.import_module(module).main(argv) or 0)


def _serve(argv: list[str]) -> int:
    from deployments.standalone import add_serve_args, main

    parser = argparse.ArgumentParser(prog="penelope serve")
    add_serve_args(parser)
    return int(main(parser.parse_args(argv)) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = __doc__.split("\n\n")[1] if __doc__ else ""
    if not argv or argv[0] in ("-h", "--help"):
        print("usage:\n" + usage)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "verify":
        return _run_module("penelope_engine.verify", rest)
    if cmd == "demo":
        return _run_module("penelope_engine.demo", rest)
    if cmd == "serve":
        return _serve(rest)
    if cmd == "bench":
        if not rest or rest[0] not in BENCHES:
            print(f"penelope bench: choose one of {', '.join(BENCHES)}", file=sys.stderr)
            return 2
        return _run_module(BENCHES[rest[0]], rest[1:])
    print(f"penelope: unknown command {cmd!r}\nusage:\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
