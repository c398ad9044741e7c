"""`penelope bench peers`: Penelope against the best set-up a user can build today.

Runs every peer set-up (`bench.sim.setups`: SGLang radix, HiCache and
Continuum caches behind Ray's pow2, Ray's PrefixCacheAffinityRouter and
sgl-router's cache_aware), Penelope and its ablations over the same seeded
workloads, simulated (Qwen3-8B on H200 by default). Two length regimes:
`--lengths quarter` (the trace's lengths x 1/4, as in the earlier figures;
nothing is cut) and `--lengths true` (the trace's lengths; a session ends at its
first request longer than `--window-tokens`, and the JSON says how many
turns that drops). JSON: `runs` (one per set-up: system, router, cache,
levers, the metrics as the mean over seeds, and `per_seed`), `best_peer`
(per metric, the peer set-up with the best mean), `vs_best_peer`
(Penelope's per-seed ratio to it); `bench.experiments.peers_report` merges runs
over more seeds. Example::

    penelope bench peers --lengths true --sessions 48 --seeds 3 --replicas 4 --json peers.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from bench.experiments.capacity_search import LENGTHS, WorkloadSpec, make_workload
from bench.experiments.peers_report import METRICS, describe, document, plot, summarize, table
from bench.sim.cliargs import add_fleet_args, comma_list
from bench.sim.config import SimConfig, default_scheduler
from bench.sim.loop import simulate
from bench.sim.metrics import RunMetrics
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel
from bench.sim.setups import Setup, hinted, setups
from bench.workload import Workload
from penelope_cli.helpformat import parser


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope bench peers", __doc__)
    add_fleet_args(ap, tuple(LENGTHS))
    ap.add_argument("--sessions", type=int, default=48, help="sessions sampled per seed")
    ap.add_argument("--setups", type=comma_list(str), default=None, help="names (default: all)")
    ap.add_argument("--no-ablations", action="store_true", help="skip Penelope's ablations")
    ap.add_argument(
        "--tuned-peers",
        action="store_true",
        help="also the peers with their engine's prefill chunking at Penelope's chunk size "
        "(best_tuned_peer)",
    )
    ap.add_argument("--jobs", type=int, default=1, help="simulations run in parallel")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--plot", type=Path, default=None, help="PNG of mean TTFT per set-up")
    return ap


def workloads(args: argparse.Namespace) -> tuple[dict[int, Workload], dict[int, int]]:
    spec = WorkloadSpec(args.trace_file, args.lengths, args.window_tokens, args.mean_interarrival_s)
    wls, dropped = {}, {}
    for s in range(args.seed_base, args.seed_base + args.seeds):
        wls[s], dropped[s] = make_workload(spec, args.sessions, s)
    return wls, dropped


def sim_config(
    setup: Setup,
    budget: int,
    host_factor: float,
    replicas: int,
    store: bool = False,
    hint_noise: float = 0.25,
) -> SimConfig:
    """`setup` on `replicas` replicas of `budget` device tokens and a host tier of
    `host_factor` x that; `store`: every set-up with a host tier also spills to a store
    (the cost model's `store_bytes_per_s`, NVMe-class), as HiCache's storage backends and
    LMCache's disk tier give the peers and the Arrow store gives Penelope; `hint_noise`:
    the sigma of hint mode's gap estimates, where the set-up is in it (`CacheSpec.hints`)."""
    spec = setup.spec
    tiers = "gpu+cpu+store" if store and spec.tiers == "gpu+cpu" else spec.tiers
    budget *= spec.kv_scale
    return SimConfig(
        policy=spec.policy,
        tiers=tiers,
        device_budget_tokens=budget,
        host_budget_tokens=int(host_factor * budget) if spec.tiers != "gpu" else 0,
        replicas=replicas,
        router=setup.router,
        page_size=64,
        layerwise_loads=spec.layerwise_loads,
        async_writes=spec.async_writes,
        async_spills=spec.async_spills,
        hints=spec.hints,
        hint_noise=hint_noise,
        free_copies=spec.free_copies,
        copy_rates=spec.copy_rates,
        scheduler=dataclasses.replace(
            default_scheduler(),
            max_batch_tokens=spec.step_tokens,
            prefill_chunk=spec.prefill_chunk,
            solo_prefill_chunk=spec.solo_prefill_chunk,
            max_prefills=spec.max_prefills,
            agent=spec.agent,
        ),
    )


def _one(job: tuple[Workload, SimConfig, GpuCostModel, int]) -> RunMetrics:
    wl, cfg, cost, seed = job
    return simulate(wl, cfg, cost, seed)


def metrics_of(m: RunMetrics, replicas: int) -> dict[str, float]:
    floors = ("mean_ttft_floor_s", "mean_llm_floor_s")
    skip = ("turns_per_hour_per_replica", *floors)
    out = {k: float(getattr(m, k)) for k in METRICS if k not in skip}
    out["mean_llm_floor_s"] = float(m.mean_llm_floor_s or 0.0)
    out["mean_ttft_floor_s"] = float(m.mean_ttft_floor_s or 0.0)
    hours = max(m.sim_time_s, 1e-9) / 3600.0
    out["turns_per_hour_per_replica"] = m.requests / hours / replicas
    out["failed_requests"] = float(m.failed_requests)
    out.update(m.miss_ratios())  # the miss ledger: why computed tokens missed, per cause
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cost = GpuCostModel(QWEN3[args.model], HARDWARE[args.gpu])
    budget = args.device_budget_tokens or cost.kv_capacity_tokens()
    wls, dropped = workloads(args)
    chosen = setups(args.setups, with_ablations=not args.no_ablations, tuned=args.tuned_peers)
    chosen = [hinted(s, args.hints) for s in chosen]  # --hints: Penelope's (peers: no API)
    fleet = (budget, args.host_budget_factor, args.replicas, args.store, args.hint_noise)
    jobs = [(wl, sim_config(s, *fleet), cost, seed) for s in chosen for seed, wl in wls.items()]
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        futures = {pool.submit(_one, job): i for i, job in enumerate(jobs)}
        results: dict[int, RunMetrics] = {}
        for fut in as_completed(futures):
            i = futures[fut]
            m = results[i] = fut.result()
            print(
                f"[{len(results)}/{len(jobs)}] {chosen[i // len(wls)].name} seed={jobs[i][3]}: "
                f"ttft {m.mean_ttft_s:.3g}s queue {m.mean_queue_s:.3g}s ({m.wall_time_s:.0f}s)",
                file=sys.stderr,
                flush=True,
            )
    runs = []
    for i, s in enumerate(chosen):
        ms = [results[j] for j in range(i * len(wls), (i + 1) * len(wls))]
        runs.append(summarize(describe(s), [metrics_of(m, args.replicas) for m in ms]))
    config = {
        **{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "device_budget_tokens": budget,
        "cost_model": cost.describe(),
        "seeds": len(wls),
        "dropped_turns": dropped,
        "turns": {s: sum(len(x.turns) for x in wl.all_sessions) for s, wl in wls.items()},
    }
    doc = document(config, runs)
    print(table(runs, doc["vs_best_peer"]))
    for name, v in doc.get("vs_best_tuned_peer", {}).items():
        r = v["mean_ttft_s"]
        best = doc["best_tuned_peer"]["mean_ttft_s"]["setup"]
        print(f"{name}: mean TTFT {r['mean']:.2f}x [{r['min']:.2f}-{r['max']:.2f}] of {best}")
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=1))
    if args.plot is not None:
        title = (
            f"{args.lengths} lengths, {args.sessions} sessions, "
            f"{args.replicas} replicas, {len(wls)} seeds"
        )
        print(f"wrote {plot(args.plot, runs, title)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
