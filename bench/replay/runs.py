"""The replay's runs: workloads by seed, device budgets, set-ups, engines, repeats.

`replay_all` replays every set-up (policy x tiers x device budget) on every
seed's workload through a fresh engine (`bench.replay.replayloop`), seeds
outermost, and keeps every engine step's timing for the calibration.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections.abc import Callable
from typing import Any

from bench.replay.replayloop import EngineReplay
from bench.sessions import Scale
from bench.sim.metrics import RunMetrics
from bench.sim.oracle import policy_for_config
from bench.sim.setups import CACHES, scaled_scheduler
from bench.tokens import TokenMap
from bench.traces import load_trace
from bench.workload import Workload, WorkloadConfig, clip_workload, sample_workload
from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.core import BenchHooks, CoreHooks
from penelope_engine.engine import Engine
from penelope_engine.model.registry import LoadedModel


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
    """Each distinct shared prefix once plus every session's longest turn past its own.

    A prefix block's KV depends on the blocks before it, so a block is stored once per
    distinct run of blocks that ends with it (the same tools after two system prompts
    are two copies); sessions without blocks share one prefix stream."""
    longest = [max(t.input_tokens + t.output_tokens for t in s.turns) for s in wl.sessions]
    own = sum(n - s.turns[0].shared_prefix_tokens for n, s in zip(longest, wl.sessions))
    runs = {
        tuple((b.kind, b.key) for b in s.prefix_blocks[: i + 1]): s.prefix_blocks[i].tokens
        for s in wl.sessions
        for i in range(len(s.prefix_blocks))
    }
    plain = [s.turns[0].shared_prefix_tokens for s in wl.sessions if not s.prefix_blocks]
    return own + sum(runs.values()) + max(plain, default=0)


def default_budget(wls: dict[int, Workload], fraction: float, page_size: int) -> int:
    """`fraction` of the smallest working set, never less than the longest turn plus 4 pages."""
    work = min(working_set_tokens(w) for w in wls.values())
    longest = max(
        t.input_tokens + t.output_tokens for w in wls.values() for s in w.sessions for t in s.turns
    )
    return max(int(fraction * work), longest + 4 * page_size) // page_size * page_size


def scheduler_config(args: argparse.Namespace, cache: str | None = None) -> SchedulerConfig:
    """The replay's scheduler; with a named engine cache (`--caches`), that cache's levers
    and prefill chunk at its share of the step (`bench.sim.setups.scaled_scheduler`)."""
    base = SchedulerConfig(args.max_batch_tokens, args.max_running, args.prefill_chunk)
    return scaled_scheduler(cache, base)


def _engine(
    args: argparse.Namespace, lm: LoadedModel, setup: dict[str, Any]
) -> Callable[[CoreHooks, BenchHooks], Engine]:
    ps = args.page_size
    policy, obj = policy_for_config(setup["policy"])
    cache = CacheConfig(
        page_size=ps,
        device_pages=setup["device_budget_tokens"] // ps,
        host_pages=setup["host_budget_tokens"] // ps,
        policy=policy,
    )
    sched = scheduler_config(args, setup.get("cache"))
    cfg = EngineConfig(args.model, args.device, args.dtype, cache, sched)
    return lambda hooks, bench: Engine(
        cfg, loaded=lm, hooks=hooks, bench=dataclasses.replace(bench, policy=obj)
    )


def setup_grid(args: argparse.Namespace, budgets: list[int]) -> list[dict[str, Any]]:
    """policy x tiers x budget, or with `--caches` each named engine cache x budget (its
    policy, tiers and levers: Penelope's whole cache against a peer's on the same engine)."""
    if args.caches:
        grid = [(c, CACHES[c].policy, CACHES[c].tiers) for c in args.caches]
    else:
        grid = [(None, p, t) for p, t in itertools.product(args.policies, args.tiers)]
    out = []
    for (cache, policy, tiers), budget in itertools.product(grid, budgets):
        host = (args.host_budget_tokens or budget) if tiers == "gpu+cpu" else 0
        out.append(
            {
                "cache": cache,
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
    rep = EngineReplay(_engine(args, lm, setup), wl, tokens)
    engine = rep.engine
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
            name = setup["cache"] or setup["policy"]
            print(
                f"[seed {seed} try {rnd}] {name} {setup['tiers']} "
                f"budget={setup['device_budget_tokens']}: ttft {m.mean_ttft_s:.3g}s "
                f"jct {m.mean_jct_s:.3g}s hit {m.hit_ratio:.3f} recomp {m.recompute_ratio:.3f} "
                f"({m.requests} req, {m.failed_requests} failed, {m.wall_time_s:.0f}s)",
                file=sys.stderr,
                flush=True,
            )
        for i, t in enumerate(tries):
            runs[i].append(sorted(t, key=lambda m: m.mean_ttft_s)[len(t) // 2])
    return runs, steps
