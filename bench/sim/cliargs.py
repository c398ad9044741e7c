"""The options `bench simulate` and `bench replay` share: the workload, the set-ups, the output.

Both sample sessions from a trace by seed and sweep policy x tiers x device
budget; they differ in their defaults (the simulator runs full-length traces
on Qwen3, the replay scaled-down ones on the tiny model), which each passes in.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from bench.sim.oracle import SIM_EVICTION_POLICIES
from bench.sim.roofline import HARDWARE, QWEN3
from bench.traces import DEFAULT_TRACE
from bench.workload import ARRIVALS


def comma_list(kind: Callable[[str], Any], choices: Collection[Any] | None = None):
    """An argparse type: "a,b,c" as a list of `kind`; with `choices`, each must be one ('all')."""

    def parse(text: str) -> list:
        items = [kind(x) for x in text.split(",") if x]
        if choices is not None:
            if items == ["all"]:
                return list(choices)
            bad = [x for x in items if x not in choices]
            if bad:
                raise argparse.ArgumentTypeError(f"unknown {bad}; valid: {', '.join(choices)}")
        return items

    return parse


def add_workload_args(
    ap: argparse.ArgumentParser,
    *,
    tiers: Sequence[str],
    sessions: int,
    seeds: int,
    length_scale: float,
    time_scale: float,
    mean_interarrival_s: float,
    budget_help: str,
) -> None:
    """Trace, sampled sessions and seeds, the policy x tiers x device budget sweep, scaling."""
    ap.add_argument("--trace-file", type=Path, default=DEFAULT_TRACE, help="trace file")
    ap.add_argument(
        "--policies",
        type=comma_list(str, SIM_EVICTION_POLICIES),
        default=["lru", "penelope"],
        help=f"comma list or 'all' ({', '.join(SIM_EVICTION_POLICIES)})",
    )
    ap.add_argument(
        "--tiers",
        type=comma_list(str, tuple(tiers)),
        default=["gpu"],
        help=f"comma list ({', '.join(tiers)})",
    )
    ap.add_argument("--sessions", type=int, default=sessions, help="sessions sampled per seed")
    ap.add_argument("--seeds", type=int, default=seeds, help="workloads, one per seed")
    ap.add_argument("--seed-base", type=int, default=0, help="first seed")
    ap.add_argument("--device-budget-tokens", type=comma_list(int), default=None, help=budget_help)
    ap.add_argument("--length-scale", type=float, default=length_scale, help="trace lengths x this")
    ap.add_argument("--time-scale", type=float, default=time_scale, help="tool gaps x this")
    ap.add_argument(
        "--mean-interarrival-s", type=float, default=mean_interarrival_s, help="scaled seconds"
    )
    ap.add_argument(
        "--arrivals",
        choices=ARRIVALS,
        default=None,
        help="poisson (default for Claude Code) or trace (default for Mooncake)",
    )


def add_step_args(
    ap: argparse.ArgumentParser, *, page_size: int, max_batch_tokens: int, max_running: int
) -> None:
    """The KV page size and the scheduler's per-step limits."""
    ap.add_argument("--page-size", type=int, default=page_size, help="tokens per KV page")
    ap.add_argument(
        "--max-batch-tokens", type=int, default=max_batch_tokens, help="tokens per engine step"
    )
    ap.add_argument(
        "--max-running", type=int, default=max_running, help="most requests running at once"
    )


def add_output_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--plot", type=Path, default=None, help="directory for the plots")


def add_gpu_args(ap: argparse.ArgumentParser) -> None:
    """The modelled GPU and model (`bench.sim.roofline`)."""
    ap.add_argument("--model", choices=sorted(QWEN3), default="qwen3-8b", help="the cost model's")
    ap.add_argument("--gpu", choices=sorted(HARDWARE), default="h200", help="the cost model's")


def add_fleet_args(ap: argparse.ArgumentParser, lengths: tuple[str, ...]) -> None:
    """The options `bench peers` and `bench capacity` share: the trace, the length regime,
    seeds, the fleet, its KV budgets and the modelled GPU."""
    ap.add_argument("--trace-file", type=Path, default=DEFAULT_TRACE, help="trace file")
    ap.add_argument("--lengths", choices=sorted(lengths), default="true", help="length regime")
    ap.add_argument(
        "--window-tokens", type=int, default=131072, help="true lengths: the model's window"
    )
    ap.add_argument("--seeds", type=int, default=3, help="workloads, one per seed")
    ap.add_argument("--seed-base", type=int, default=0, help="first seed")
    ap.add_argument("--replicas", type=int, default=4, help="simulated replicas")
    ap.add_argument("--mean-interarrival-s", type=float, default=5.0, help="Poisson session starts")
    ap.add_argument(
        "--device-budget-tokens",
        type=int,
        default=None,
        help="KV tokens per replica (default: what fits on the GPU after the weights)",
    )
    ap.add_argument(
        "--host-budget-factor", type=float, default=2.0, help="host tier / device budget"
    )
    ap.add_argument(
        "--store",
        action="store_true",
        help="set-ups with a host tier also spill to a store at the cost model's NVMe-class "
        "bandwidth (HiCache storage backends, LMCache disk, Penelope's Arrow store)",
    )
    ap.add_argument(
        "--hints",
        action="store_true",
        help="hint mode for the set-ups over Penelope's engine: each request carries a "
        "harness's hints from the trace (expected_gap_s, end_session on the last turn); the "
        "peers run unchanged (SGLang and vLLM have no hint API). Or name penelope+hints",
    )
    ap.add_argument(
        "--hint-noise",
        type=float,
        default=0.25,
        metavar="SIGMA",
        help="hint mode: expected_gap_s is the real gap x exp(SIGMA * N(0,1)), seeded",
    )
    add_gpu_args(ap)
