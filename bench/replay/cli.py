"""`penelope bench replay`: agent traces through the real engine, every policy, one run.

Samples sessions from a trace (Claude Code or Mooncake) by seed, cuts each to
its first `--turns` turns with outputs capped at `--max-output-tokens`, and
replays them concurrently in wall-clock time (`bench.replay.replayloop`) on a fresh
engine per set-up (policy x tiers x device budget), seeds outermost so that
drift in the machine's load touches every set-up alike. Lengths are scaled by
`--length-scale` and tool gaps by `--time-scale`, both stated in the output.
With `--calibrate` it then fits the simulator's CPU cost model on this
machine and reports the simulator's mean-TTFT error on the same workloads.
Example (about 4 minutes on one thread)::

    penelope bench replay --sessions 8 --seeds 2 --policies lru,return_aware,oracle \\
        --calibrate --json replay.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch

from bench.replay import calibrate
from bench.replay.runs import (
    default_budget,
    replay_all,
    scheduler_config,
    setup_grid,
    working_set_tokens,
    workloads,
)
from bench.sim.cliargs import add_output_args, add_step_args, add_workload_args, comma_list
from bench.sim.config import SimConfig
from bench.sim.report import plot, row, table, write_json
from bench.sim.setups import CACHES
from bench.workload import Workload
from penelope_cli.helpformat import parser
from penelope_engine.model.registry import LoadedModel, load_model
from penelope_engine.tiers.kv_pool import DTYPES


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope bench replay", __doc__)
    add_workload_args(
        ap,
        tiers=("gpu", "gpu+cpu"),
        sessions=8,
        seeds=1,
        length_scale=1 / 64,
        time_scale=1 / 64,
        mean_interarrival_s=0.5,
        budget_help="comma list to sweep (default: --budget-fraction of the working set)",
    )
    ap.add_argument(
        "--caches",
        type=comma_list(str, tuple(CACHES)),
        default=None,
        help="named engine caches (policy, tiers, levers, chunk share) instead of "
        f"--policies x --tiers; the first is the ratios' reference ({', '.join(CACHES)})",
    )
    ap.add_argument("--turns", type=int, default=6, help="first turns of each session")
    ap.add_argument("--max-output-tokens", type=int, default=8, help="cap on each turn's output")
    ap.add_argument(
        "--max-think-s",
        type=float,
        default=math.inf,
        help="cap on each scaled gap between turns (inf: none)",
    )
    ap.add_argument("--budget-fraction", type=float, default=0.5, help="of the working set")
    ap.add_argument(
        "--host-budget-tokens", type=int, default=None, help="with gpu+cpu (default: the device's)"
    )
    ap.add_argument("--model", default="tiny-qwen3", help="registered model name or directory")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--dtype", default="float32", help="model and KV dtype")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (stated in the output)")
    add_step_args(ap, page_size=16, max_batch_tokens=2048, max_running=64)
    ap.add_argument("--prefill-chunk", type=int, default=1024, help="a request's tokens per step")
    ap.add_argument(
        "--repeats", type=int, default=1, help="runs per set-up and seed; the median is kept"
    )
    ap.add_argument("--calibrate", action="store_true", help="fit the CPU cost model, compare")
    ap.add_argument(
        "--recalibrate",
        type=Path,
        default=None,
        metavar="REPLAY_JSON",
        help="no replay: calibrate against the measured TTFTs of a saved replay (its settings)",
    )
    add_output_args(ap)
    return ap


def saved_replay_argv(config: dict[str, Any]) -> list[str]:
    """The options that reproduce the workloads, engine and scheduler of a saved replay."""
    seeds, sched, engine = config["seeds"], config["scheduler"], config["engine"]
    opts = {
        "--trace-file": config["trace_file"],
        "--sessions": config["sessions"],
        "--seed-base": seeds[0],
        "--seeds": len(seeds),
        "--turns": config["turns_per_session"],
        "--max-output-tokens": config["max_output_tokens"],
        "--length-scale": config["length_scale"],
        "--time-scale": config["time_scale"],
        "--mean-interarrival-s": config["mean_interarrival_s"],
        "--page-size": config["page_size"],
        "--max-batch-tokens": sched["max_batch_tokens"],
        "--max-running": sched["max_running"],
        "--prefill-chunk": sched["prefill_chunk"],
        "--model": engine["model"],
        "--device": engine["device"],
        "--dtype": engine["dtype"],
        "--threads": config["torch_threads"],
    }
    if config.get("max_think_s") is not None:
        opts["--max-think-s"] = config["max_think_s"]
    if config.get("caches"):
        opts["--caches"] = ",".join(config["caches"])
    return [str(x) for kv in opts.items() for x in kv]


def _calibration(
    args: argparse.Namespace, lm: LoadedModel, rows: list, wls: dict[int, Workload], steps: list
) -> dict[str, Any]:
    """`calibrate.calibration_report` with this replay's page size, scheduler and model."""
    kv_bytes = lm.config.kv_bytes_per_token(DTYPES[args.dtype].itemsize)
    base = SimConfig(
        page_size=args.page_size, scheduler=scheduler_config(args), vocab_size=lm.config.vocab_size
    )
    return calibrate.calibration_report(lm, rows, wls, steps, base, kv_bytes)


def recalibrate(path: Path, out: Path | None) -> int:
    """Calibrate the simulator against a saved replay's measured TTFTs (no new replay)."""
    doc = json.loads(path.read_text())
    args = build_parser().parse_args(saved_replay_argv(doc["config"]))
    torch.set_num_threads(args.threads)
    wls, _ = workloads(args)
    lm = load_model(args.model, args.dtype, args.device)
    cal = _calibration(args, lm, doc["runs"], wls, [])
    print(calibrate.format_calibration(cal))
    if out is not None:
        doc["config"]["calibration"] = cal
        out.write_text(json.dumps(doc, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.recalibrate is not None:
        return recalibrate(args.recalibrate, args.json)
    if args.repeats < 1 or args.threads < 1 or args.sessions < 1 or args.seeds < 1:
        parser.error("--repeats, --threads, --sessions and --seeds must be >= 1")
    torch.set_num_threads(args.threads)
    wls, trace_info = workloads(args)
    budgets = args.device_budget_tokens or [
        default_budget(wls, args.budget_fraction, args.page_size)
    ]
    lm = load_model(args.model, args.dtype, args.device)
    setups = setup_grid(args, budgets)
    load_before = os.getloadavg()
    runs, steps = replay_all(args, lm, wls, setups)
    rows = [{**row(s, r), "cache": s["cache"]} for s, r in zip(setups, runs)]
    config = {
        "trace_file": str(args.trace_file),
        **trace_info,
        "engine": {"model": args.model, "device": args.device, "dtype": args.dtype},
        "torch_threads": torch.get_num_threads(),
        "load_average_before_after": [load_before[0], os.getloadavg()[0]],
        "sessions": args.sessions,
        "caches": args.caches,
        "seeds": list(wls),
        "turns_per_session": args.turns,
        "max_output_tokens": args.max_output_tokens,
        "repeats": args.repeats,
        "max_think_s": None if math.isinf(args.max_think_s) else args.max_think_s,
        "mean_interarrival_s": args.mean_interarrival_s,
        "page_size": args.page_size,
        "scheduler": dataclasses.asdict(scheduler_config(args)),
        "device_budgets": budgets,
        "working_set_tokens": {s: working_set_tokens(w) for s, w in wls.items()},
    }
    print(table(rows))
    if args.json is not None:  # the replay is kept even if calibrating fails (--recalibrate)
        write_json(args.json, config, rows)
    if args.calibrate:
        print("calibrating: timing the engine's steps ...", file=sys.stderr, flush=True)
        cal = _calibration(args, lm, rows, wls, steps)
        config["calibration"] = cal
        print(calibrate.format_calibration(cal))
    if args.json is not None:
        write_json(args.json, config, rows)
    if args.plot is not None:
        cdfs = [(s, [t for m in r for t in m.ttfts]) for s, r in zip(setups, runs)]
        for path in plot(args.plot, rows, cdfs):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
