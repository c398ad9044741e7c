"""`penelope bench speed`: the embedded engine's speed, alone or against another server.

    penelope bench speed [--json OUT] [--against URL --against-pid PID] [--dtype float32]

Starts `penelope serve` (one thread, `--model`, `--dtype`) and measures, per
run: prefill tokens/s and TTFT of a fresh `--prompt-tokens` prompt, decode
tokens/s of one stream and of `--batch` concurrent streams, and a
`--turns`-turn session's per-turn TTFT and cached tokens; then, in this
process, a decode step of `--batch` rows under a JSON grammar against a free
one (`constrained`: `bench.speed.constrained`). With `--against`
(any OpenAI-compatible server serving the same model; `--against-pid` its
process, whose tree's CPU is read) the two sides run alternately, `--repeats`
times, side order flipping each run, on the same token-id prompts (greedy).
Every figure is also per CPU-second of the server's process tree, the fair
one on a shared machine (`bench.speed.measure` says which window each uses).
JSON (`ours`, `theirs`, `ratios`: ours/theirs, TTFT inverted, so above 1 we
are ahead) goes to OUT, the table to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from bench.speed.config import SpeedConfig
from bench.speed.cpu import CpuClock
from bench.speed.report import medians, ratios, table


def build_parser() -> argparse.ArgumentParser:
    from penelope_engine.helpformat import add_config_args, parser

    ap = parser("penelope bench speed", __doc__)
    add_config_args(ap, SpeedConfig)
    ap.add_argument("--json", default=None, metavar="OUT", help="write the JSON result here")
    return ap


def run_speed(cfg: SpeedConfig) -> dict[str, Any]:
    from bench.client import first_model
    from bench.speed.measure import Side, run_side, warm_up
    from bench.speed.server import penelope_server

    if bool(cfg.against) != bool(cfg.against_pid):
        raise SystemExit("--against and --against-pid go together")
    with penelope_server(cfg) as ours_server, CpuClock(ours_server.pid) as ours_clock:
        sides = [Side("ours", ours_server.url, first_model(ours_server.url), ours_clock)]
        theirs_clock = CpuClock(cfg.against_pid) if cfg.against else None
        with theirs_clock or _nothing():
            if theirs_clock is not None:
                model = cfg.against_model or first_model(cfg.against)
                sides.append(Side("theirs", cfg.against, model, theirs_clock))
            for side in sides:
                warm_up(side, cfg)
            runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in sides}
            for run in range(cfg.repeats):
                for side in sides if run % 2 == 0 else sides[::-1]:
                    runs[side.name].append(run_side(side, cfg, run))
    result: dict[str, Any] = {"bench": "speed", "config": dataclasses.asdict(cfg)}
    for name in ("ours", "theirs"):
        result[name] = medians(runs[name], cfg.batch) if name in runs else None
    theirs = result["theirs"]
    result["ratios"] = ratios(result["ours"], theirs, cfg.batch) if theirs else None
    result["runs"] = runs
    if cfg.constrained_steps:  # after the servers' runs: this process loads its own engine
        from bench.speed.constrained import constrained_step_cost

        result["constrained"] = constrained_step_cost(cfg)
    return result


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = SpeedConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SpeedConfig)})
    result = run_speed(cfg)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
