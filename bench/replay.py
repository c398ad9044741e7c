"""`penelope bench replay`: agent traces through the real engine, every policy, one run.

Samples sessions from a trace (Claude Code or Mooncake) by seed, cuts each to
its first `--turns` turns with outputs capped at `--max-output-tokens`, and
replays them concurrently in wall-clock time (`bench.replayloop`) on a fresh
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
import itertools
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch

from bench import calibrate
from bench.metrics import RunMetrics
from bench.replayloop import EngineReplay
from bench.report import plot, row, table, write_json
from bench.sim import SimConfig
from bench.simulate import _list
from bench.tokens import TokenMap
from bench.traces import DEFAULT_TRACE, Scale, load_trace
from bench.workload import ARRIVALS, Workload, WorkloadConfig, clip_workload, sample_workload
from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.engine import Engine
from penelope_engine.helpformat import parser
from penelope_engine.kv_pool import DTYPES
from penelope_engine.model.registry import LoadedModel, load_model
from penelope_engine.policies import POLICIES


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope bench replay", __doc__)
    ap.add_argument("--trace-file", type=Path, default=DEFAULT_TRACE, help="trace file")
    ap.add_argument(
        "--policies",
        type=_list(str, POLICIES),
        default=["lru", "penelope"],
        help=f"comma list or 'all' ({', '.join(POLICIES)})",
    )
    ap.add_argument(
        "--tiers", type=_list(str, ("gpu", "gpu+cpu")), default=["gpu"], help="comma list"
    )
    ap.add_argument("--sessions", type=int, default=8, help="sessions sampled per seed")
    ap.add_argument("--seeds", type=int, default=1, help="workloads, one per seed")
    ap.add_argument("--seed-base", type=int, default=0, help="first seed")
    ap.add_argument("--turns", type=int, default=6, help="first turns of each session")
    ap.add_argument("--max-output-tokens", type=int, default=8, help="cap on each turn's output")
    ap.add_argument(
        "--max-think-s",
        type=float,
        default=math.inf,
        help="cap on each scaled gap between turns (inf: none)",
    )
    ap.add_argument(
        "--device-budget-tokens",
        type=_list(int),
        default=None,
        help="comma list to sweep (default: --budget-fraction of the working set)",
    )
    ap.add_argument("--budget-fraction", type=float, default=0.5, help="of the working set")
    ap.add_argument(
        "--host-budget-tokens", type=int, default=None, help="with gpu+cpu (default: the device's)"
    )
    ap.add_argument("--model", default="tiny-qwen3", help="registered model name or directory")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--dtype", default="float32", help="model and KV dtype")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (stated in the output)")
    ap.add_argument("--length-scale", type=float, default=1 / 64, help="trace lengths x this")
    ap.add_argument("--time-scale", type=float, default=1 / 64, help="tool gaps x this")
    ap.add_argument("--mean-interarrival-s", type=float, default=0.5, help="scaled seconds")
    ap.add_argument("--arrivals", choices=ARRIVALS, help="default: trace if Mooncake, else poisson")
    ap.add_argument("--page-size", type=int, default=16, help="tokens per KV page")
    ap.add_argument("--max-batch-tokens", type=int, default=2048, help="tokens per engine step")
    ap.add_argument("--prefill-chunk", type=int, default=1024, help="a request's tokens per step")
    ap.add_argument("--max-running", type=int, default=64, help="most requests running at once")
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
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--plot", type=Path, default=None, help="directory for the plots")
    return ap


def workloads(args: argparse.Namespace) -> tuple[dict[int, Workload], dict[str, Any]]:
    trace = load_trace(args.trace_file, Scale(args.length_scale, args.time_scale))
    arrivals = args.arrivals or ("trace" if trace.name == "mooncake" else "poisson")
    out = {}
    for s in range(args.seed_base, args.seed_base + args.seeds):
        cfg = WorkloadConfig(args.sessions, s, args.mean_interarrival_s, arrivals, False)
        out[s] = clip_workload(
            sample_workload(trace, cfg), args.turns, args.max_output_tokens, args.max_think_s
        )
    return out, trace.describe()


def working_set_tokens(wl: Workload) -> int:
    """Shared prefix once plus every session's longest turn past it."""
    longest = [max(t.input_tokens + t.output_tokens for t in s.turns) for s in wl.sessions]
    shared = max(s.turns[0].shared_prefix_tokens for s in wl.sessions)
    return shared + sum(n - shared for n in longest)


def default_budget(wls: dict[int, Workload], fraction: float, page_size: int) -> int:
    """`fraction` of the smallest working set, never less than the longest turn plus 4 pages."""
    work = min(working_set_tokens(w) for w in wls.values())
    longest = max(
        t.input_tokens + t.output_tokens for w in wls.values() for s in w.sessions for t in s.turns
    )
    return max(int(fraction * work), longest + 4 * page_size) // page_size * page_size


def _scheduler(args: argparse.Namespace) -> SchedulerConfig:
    return SchedulerConfig(args.max_batch_tokens, args.max_running, args.prefill_chunk)


def _engine(args: argparse.Namespace, lm: LoadedModel, setup: dict[str, Any]) -> Engine:
    ps = args.page_size
    cache = CacheConfig(
        page_size=ps,
        device_pages=setup["device_budget_tokens"] // ps,
        host_pages=setup["host_budget_tokens"] // ps,
        policy=setup["policy"],
    )
    cfg = EngineConfig(args.model, args.device, args.dtype, cache, _scheduler(args))
    return Engine(cfg, loaded=lm)


def _setups(args: argparse.Namespace, budgets: list[int]) -> list[dict[str, Any]]:
    out = []
    for policy, tiers, budget in itertools.product(args.policies, args.tiers, budgets):
        host = (args.host_budget_tokens or budget) if tiers == "gpu+cpu" else 0
        out.append(
            {
                "policy": policy,
                "tiers": tiers,
                "router": "pow2",  # one replica: any router sends everything to it
                "replicas": 1,
                "device_budget_tokens": budget,
                "host_budget_tokens": host,
            }
        )
    return out


def _replay_once(
    args: argparse.Namespace, lm: LoadedModel, wl: Workload, setup: dict, tokens: TokenMap
) -> tuple[RunMetrics, list]:
    engine = _engine(args, lm, setup)
    rep = EngineReplay(engine, wl, tokens)
    m = rep.run()
    engine.check_integrity()
    outside = rep.outside_steps_s / max(m.requests, 1)
    print(
        f"  outside engine steps: {1e3 * outside:.2f} ms per request; "
        f"preemptions: {rep.preemptions}",
        file=sys.stderr,
    )
    return m, rep.timer.samples


def replay_all(
    args: argparse.Namespace, lm: LoadedModel, wls: dict[int, Workload], setups: list[dict]
) -> tuple[list[list[RunMetrics]], list]:
    """Every set-up on every workload, seeds outermost; also every engine step's timing.

    With `--repeats N` each seed runs every set-up N times, round-robin, and
    keeps the run of median mean TTFT: a burst of another process on the
    machine then spoils one repeat of one set-up, not the comparison.
    """
    runs: list[list[RunMetrics]] = [[] for _ in setups]
    steps: list = []
    tokens = TokenMap(lm.config.vocab_size)
    for seed, wl in wls.items():
        tries: list[list[RunMetrics]] = [[] for _ in setups]
        for rnd, (i, setup) in itertools.product(range(args.repeats), enumerate(setups)):
            m, samples = _replay_once(args, lm, wl, setup, tokens)
            tries[i].append(m)
            steps += samples
            print(
                f"[seed {seed} try {rnd}] {setup['policy']} {setup['tiers']} "
                f"budget={setup['device_budget_tokens']}: ttft {m.mean_ttft_s:.3g}s "
                f"jct {m.mean_jct_s:.3g}s hit {m.hit_ratio:.3f} recomp {m.recompute_ratio:.3f} "
                f"({m.requests} req, {m.failed_requests} failed, {m.wall_time_s:.0f}s)",
                file=sys.stderr,
                flush=True,
            )
        for i, t in enumerate(tries):
            runs[i].append(sorted(t, key=lambda m: m.mean_ttft_s)[len(t) // 2])
    return runs, steps


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
    return [str(x) for kv in opts.items() for x in kv]


def _calibration(
    args: argparse.Namespace, lm: LoadedModel, rows: list, wls: dict[int, Workload], steps: list
) -> dict[str, Any]:
    """`calibrate.calibration_report` with this replay's page size, scheduler and model."""
    kv_bytes = lm.config.kv_bytes_per_token(DTYPES[args.dtype].itemsize)
    base = SimConfig(
        page_size=args.page_size, scheduler=_scheduler(args), vocab_size=lm.config.vocab_size
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
    setups = _setups(args, budgets)
    load_before = os.getloadavg()
    runs, steps = replay_all(args, lm, wls, setups)
    rows = [row(s, r) for s, r in zip(setups, runs)]
    config = {
        "trace_file": str(args.trace_file),
        **trace_info,
        "engine": {"model": args.model, "device": args.device, "dtype": args.dtype},
        "torch_threads": torch.get_num_threads(),
        "load_average_before_after": [load_before[0], os.getloadavg()[0]],
        "sessions": args.sessions,
        "seeds": list(wls),
        "turns_per_session": args.turns,
        "max_output_tokens": args.max_output_tokens,
        "repeats": args.repeats,
        "max_think_s": None if math.isinf(args.max_think_s) else args.max_think_s,
        "mean_interarrival_s": args.mean_interarrival_s,
        "page_size": args.page_size,
        "scheduler": vars(_scheduler(args)),
        "device_budgets": budgets,
        "working_set_tokens": {s: working_set_tokens(w) for s, w in wls.items()},
    }
    print(table(rows))
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
