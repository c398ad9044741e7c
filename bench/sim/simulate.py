"""`penelope bench simulate`: agent traces on simulated Qwen3 replicas, every lever.

Runs each set-up (policy x tiers x router x device budget) over the same
seeded workloads (seed s: the same sessions and arrival times for every
set-up), with time from the stated GPU cost model (or a fitted CPU model,
`--cpu-cost FILE`), and reports the mean and spread over seeds as JSON
(`--json`), a table, and plots (`--plot DIR`). Example::

    penelope bench simulate --sessions 48 --seeds 6 --policies all \\
        --tiers gpu,gpu+cpu --router pow2,affinity --replicas 4 --json sim.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

from bench.peers.registry import SIM_ROUTERS
from bench.sessions import Scale, Trace
from bench.sim.cliargs import (
    add_gpu_args,
    add_output_args,
    add_step_args,
    add_workload_args,
    comma_list,
)
from bench.sim.config import SimConfig
from bench.sim.costmodel import CostModel, CpuCostModel
from bench.sim.loop import simulate
from bench.sim.metrics import RunMetrics
from bench.sim.replica import TIERS
from bench.sim.report import plot, row, table, write_json
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel
from bench.traces import load_trace
from bench.workload import Workload, WorkloadConfig, sample_workload
from penelope_cli.helpformat import parser
from penelope_engine.config import SchedulerConfig


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope bench simulate", __doc__)
    add_workload_args(
        ap,
        tiers=TIERS,
        sessions=48,
        seeds=3,
        length_scale=1.0,
        time_scale=1.0,
        mean_interarrival_s=5.0,
        budget_help="per replica, comma list to sweep (default: what fits after weights)",
    )
    ap.add_argument(
        "--router",
        type=comma_list(str, SIM_ROUTERS),
        default=["pow2"],
        help=f"comma list ({', '.join(SIM_ROUTERS)})",
    )
    ap.add_argument("--replicas", type=int, default=1, help="simulated replicas")
    ap.add_argument(
        "--no-prefix-affinity",
        action="store_true",
        help="affinity router: place new sessions by hashing, not by where a prefix is cached",
    )
    ap.add_argument(
        "--host-budget-tokens",
        type=int,
        default=None,
        help="per replica with a host tier (default: --host-budget-factor x the device budget)",
    )
    ap.add_argument(
        "--host-budget-factor", type=float, default=4.0, help="host budget / device budget"
    )
    add_gpu_args(ap)
    ap.add_argument(
        "--cpu-cost",
        type=Path,
        default=None,
        help="JSON of fitted CpuCostModel fields (bench calibrate); replaces the GPU",
    )
    add_step_args(ap, page_size=64, max_batch_tokens=8192, max_running=64)
    add_output_args(ap)
    return ap


def _cost(args: argparse.Namespace) -> CostModel:
    if args.cpu_cost is not None:
        return CpuCostModel(**json.loads(args.cpu_cost.read_text()))
    return GpuCostModel(QWEN3[args.model], HARDWARE[args.gpu])


def _workloads(trace: Trace, args: argparse.Namespace) -> dict[int, Workload]:
    arrivals = args.arrivals or ("trace" if trace.name == "mooncake" else "poisson")
    return {
        s: sample_workload(
            trace,
            WorkloadConfig(
                args.sessions,
                seed=s,
                mean_interarrival_s=args.mean_interarrival_s,
                arrivals=arrivals,
            ),
        )
        for s in range(args.seed_base, args.seed_base + args.seeds)
    }


def _config(args: argparse.Namespace, trace: Trace, cost: CostModel, budgets: list[int]) -> dict:
    return {
        "trace_file": str(args.trace_file),
        **trace.describe(),
        "sessions": args.sessions,
        "seeds": list(range(args.seed_base, args.seed_base + args.seeds)),
        "mean_interarrival_s": args.mean_interarrival_s,
        "page_size": args.page_size,
        "max_batch_tokens": args.max_batch_tokens,
        "max_running": args.max_running,
        "device_budgets": budgets,
        "host_budget": args.host_budget_tokens or f"{args.host_budget_factor} x device",
        "cost_model": cost.describe(),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    trace = load_trace(args.trace_file, Scale(args.length_scale, args.time_scale))
    cost = _cost(args)
    budgets = args.device_budget_tokens or [getattr(cost, "kv_capacity_tokens", lambda: 0)()]
    if not all(b > 0 for b in budgets):
        raise SystemExit("give --device-budget-tokens (the CPU cost model has no GPU memory)")
    workloads = _workloads(trace, args)
    sched = SchedulerConfig(
        max_batch_tokens=args.max_batch_tokens,
        max_running=args.max_running,
        prefill_chunk=args.max_batch_tokens,
    )
    setups = list(itertools.product(args.policies, args.tiers, args.router, budgets))
    rows, cdfs = [], []
    for i, (policy, tiers, router, budget) in enumerate(setups):
        host = args.host_budget_tokens or int(args.host_budget_factor * budget)
        host = host if tiers != "gpu" else 0  # gpu+cpu and gpu+cpu+store have a host tier
        cfg = SimConfig(
            policy=policy,
            tiers=tiers,
            device_budget_tokens=budget,
            host_budget_tokens=host,
            replicas=args.replicas,
            router=router,
            prefix_affinity=not args.no_prefix_affinity,
            page_size=args.page_size,
            scheduler=sched,
        )
        runs: list[RunMetrics] = []
        for seed, wl in workloads.items():
            m = simulate(wl, cfg, cost, seed)
            runs.append(m)
            print(
                f"[{i + 1}/{len(setups)}] {policy} {tiers} {router} budget={budget} "
                f"seed={seed}: ttft {m.mean_ttft_s:.3g}s jct {m.mean_jct_s:.4g}s "
                f"hit {m.hit_ratio:.3f} ({m.wall_time_s:.1f}s)",
                file=sys.stderr,
                flush=True,
            )
        setup = {**cfg.describe(), "device_budget_tokens": budget}
        rows.append(row(setup, runs))
        if budget == min(budgets):
            cdfs.append((setup, [t for r in runs for t in r.ttfts]))
    print(table(rows))
    if args.json is not None:
        write_json(args.json, _config(args, trace, cost, budgets), rows)
    if args.plot is not None:
        for path in plot(args.plot, rows, cdfs):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
