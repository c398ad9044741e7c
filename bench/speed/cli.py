"""`penelope bench speed`: the embedded engine's speed, alone or against another server.

    penelope bench speed [--json OUT] [--against URL --against-pid PID] [--dtype float32]
        [--weights int8] [--peers llama-q8_0,vllm-bfloat16]

Starts `penelope serve` (one thread, `--model`, `--dtype`) and measures, per
run: prefill tokens/s and TTFT of a fresh `--prompt-tokens` prompt, decode
tokens/s of one stream and of `--batch` concurrent streams, and a
`--turns`-turn session's per-turn TTFT and cached tokens; then, in this
process, a decode step of `--batch` rows under a JSON grammar against a free
one (`constrained`: `bench.speed.constrained`). With `--against`
(any OpenAI-compatible server serving the same model; `--against-pid` its
process, whose tree's CPU is read) and with `--peers` (started here from the
project's scripts: `bench.speed.peers`) the sides run in turn, `--repeats`
times, each run starting with the next side, on the same token-id prompts
(greedy).
Every figure is also per CPU-second of the server's process tree, the fair
one on a shared machine (`bench.speed.measure` says which window each uses).
JSON (`ours`, `theirs`, `ratios`: ours/theirs, TTFT inverted, so above 1 we
are ahead; `peers` and `peer_ratios` per started peer, with its weights and
version; `cpu`: the model and vector flags) goes to OUT, the table to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.speed.config import SpeedConfig
from bench.speed.cpu import CpuClock
from bench.speed.report import medians, ratios, table


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import add_config_args, parser

    ap = parser("penelope bench speed", __doc__)
    add_config_args(ap, SpeedConfig)
    ap.add_argument("--json", default=None, metavar="OUT", help="write the JSON result here")
    return ap


def run_speed(cfg: SpeedConfig) -> dict[str, Any]:
    from bench.client import first_model
    from bench.sampler import cpu_info
    from bench.speed.measure import Side, run_side, warm_up
    from bench.speed.server import penelope_server, started_peers

    with ExitStack() as stack:
        ours_server = stack.enter_context(penelope_server(cfg))
        ours_clock = stack.enter_context(CpuClock(ours_server.pid))
        sides = [Side("ours", ours_server.url, first_model(ours_server.url), ours_clock)]
        if cfg.against:
            clock = stack.enter_context(CpuClock(cfg.against_pid))
            model = cfg.against_model or first_model(cfg.against)
            sides.append(Side("theirs", cfg.against, model, clock))
        peers = stack.enter_context(started_peers(cfg))
        for peer in peers:
            clock = stack.enter_context(CpuClock(peer.pid))
            sides.append(Side(peer.name, peer.url, first_model(peer.url), clock))
        for side in sides:
            warm_up(side, cfg)
        runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in sides}
        for run in range(cfg.repeats):  # each run starts with the next side: none always first
            turn = run % len(sides)
            for side in sides[turn:] + sides[:turn]:
                runs[side.name].append(run_side(side, cfg, run))
    result: dict[str, Any] = {"bench": "speed", "config": dataclasses.asdict(cfg)}
    result["cpu"] = cpu_info()
    result["ours"] = medians(runs["ours"], cfg.batch)
    result["theirs"] = medians(runs["theirs"], cfg.batch) if "theirs" in runs else None
    theirs = result["theirs"]
    result["ratios"] = ratios(result["ours"], theirs, cfg.batch) if theirs else None
    result["peers"] = {p.name: medians(runs[p.name], cfg.batch) | p.about() for p in peers}
    result["peer_ratios"] = {
        name: ratios(result["ours"], peer, cfg.batch) for name, peer in result["peers"].items()
    }
    result["runs"] = runs
    if cfg.constrained_steps:  # after the servers' runs: this process loads its own engine
        from bench.speed.constrained import constrained_step_cost

        result["constrained"] = constrained_step_cost(cfg)
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(SpeedConfig)}
    values["peers"] = tuple(p for p in values["peers"].split(",") if p)
    cfg = SpeedConfig(**values)
    result = run_speed(cfg)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
