"""How many agent sessions a fleet holds within a TTFT SLO: one set-up, one seed.

`search` finds the largest session count whose p90 TTFT is within the SLO:
it doubles the count from `start` until a count misses the SLO (or `max`
passes), then bisects between the last count that met it and the first that
did not, down to `resolution` sessions. Every count it runs is a point of the
set-up's curve (sessions -> mean and p90 TTFT, queue, hit ratio, LLM time).
Sessions start as Poisson arrivals at a fixed mean gap, so a session count is
a concurrency: the counts here start within minutes and run for hours.

The search assumes p90 TTFT grows with the count; where a seed's curve is not
monotonic the result is the bisection's and the curve shows the rest.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.sessions import Scale, Trace
from bench.sim.config import SimConfig
from bench.sim.loop import simulate
from bench.sim.roofline import GpuCostModel
from bench.traces import load_trace
from bench.workload import Workload, WorkloadConfig, cut_at_window, sample_workload

LENGTHS = {"true": 1.0, "quarter": 0.25}
SLO_S = {"true": 2.0, "quarter": 0.5}  # default p90 TTFT targets per length regime


@dataclass(frozen=True)
class WorkloadSpec:
    """What a session count becomes a workload with (shared by every set-up and count)."""

    trace_file: Path
    lengths: str = "true"
    window_tokens: int = 131072
    mean_interarrival_s: float = 5.0

    def __post_init__(self) -> None:
        if self.lengths not in LENGTHS:
            raise ValueError(f"lengths must be one of {sorted(LENGTHS)}, got {self.lengths!r}")
        if self.mean_interarrival_s <= 0 or self.window_tokens < 1:
            raise ValueError("mean_interarrival_s and window_tokens must be positive")


@functools.cache
def _trace(path: Path, lengths: str) -> Trace:
    return load_trace(path, Scale(LENGTHS[lengths], 1.0))


def make_workload(spec: WorkloadSpec, sessions: int, seed: int) -> tuple[Workload, int]:
    """`sessions` sampled with `seed`; at true lengths cut at the window (dropped turns)."""
    wl = sample_workload(
        _trace(spec.trace_file, spec.lengths),
        WorkloadConfig(sessions, seed=seed, mean_interarrival_s=spec.mean_interarrival_s),
    )
    # 1/4 length is the regime of the earlier figures: nothing is cut there
    return cut_at_window(wl, spec.window_tokens) if spec.lengths == "true" else (wl, 0)


@dataclass(frozen=True)
class SearchSpec:
    slo_s: float
    start: int = 32
    max_sessions: int = 1024
    resolution: int = 8  # the bisection stops when the bracket is this narrow

    def __post_init__(self) -> None:
        if self.slo_s <= 0:
            raise ValueError(f"slo_s must be positive, got {self.slo_s}")
        if not 1 <= self.start <= self.max_sessions or self.resolution < 1:
            raise ValueError("need 1 <= start <= max_sessions and resolution >= 1")


@dataclass
class SearchResult:
    sessions_at_slo: int  # 0: even `start` sessions miss the SLO
    capped: bool  # `max_sessions` still met the SLO
    curve: dict[int, dict[str, float]] = field(default_factory=dict)

    def crossing(self, slo_s: float) -> float:
        """Where p90 TTFT crosses the SLO inside the bisection's bracket (the last count
        that met it, the next that did not), log p90 taken as linear in sessions
        there: near saturation p90 grows about exponentially with load (a straight
        line on a log axis). A finer figure than a coarse resolution gives; the
        last count that met the SLO when nothing above it was run."""
        return crossing({n: p["p90_ttft_s"] for n, p in self.curve.items()}, slo_s)


def crossing(p90: dict[int, float], slo_s: float) -> float:
    """`SearchResult.crossing` on a curve of session count -> p90 TTFT."""
    ok = [n for n, v in p90.items() if v <= slo_s]
    good = max(ok, default=0)
    above = [n for n in p90 if n > good and p90[n] > slo_s]
    if not ok or not above:
        return float(good)
    bad = min(above)
    lo, hi = math.log(max(p90[good], 1e-9)), math.log(p90[bad])
    frac = (math.log(slo_s) - lo) / (hi - lo)
    return good + frac * (bad - good)


def point(spec: WorkloadSpec, cfg: SimConfig, cost: GpuCostModel, n: int, seed: int) -> dict:
    """One count's figures for one set-up and seed."""
    wl, dropped = make_workload(spec, n, seed)
    m = simulate(wl, cfg, cost, seed)
    return {
        "mean_ttft_s": m.mean_ttft_s,
        "p90_ttft_s": m.p90_ttft_s,
        "mean_queue_s": m.mean_queue_s,
        "hit_ratio": m.hit_ratio,
        "mean_llm_time_s": m.mean_llm_time_s,
        "recompute_ratio": m.recompute_ratio,
        "host_ratio": m.host_ratio,
        "store_ratio": m.store_ratio,
        **m.miss_ratios(),  # the miss ledger: `miss_<cause>_ratio`
        "requests": float(m.requests),
        "failed_requests": float(m.failed_requests),
        "dropped_turns": float(dropped),
        "wall_time_s": m.wall_time_s,
    }


def search(measure: Callable[[int], dict[str, float]], s: SearchSpec) -> SearchResult:
    """The largest count within the SLO, by doubling then bisection (module docstring).

    `measure(n)` runs `n` sessions and returns their figures (`point`)."""
    curve: dict[int, dict[str, float]] = {}

    def meets(n: int) -> bool:
        if n not in curve:
            curve[n] = measure(n)
        return curve[n]["p90_ttft_s"] <= s.slo_s

    good, bad = 0, None
    n = s.start
    while n <= s.max_sessions and bad is None:
        if meets(n):
            good, n = n, n * 2
        else:
            bad = n
    if bad is None:  # every doubling met the SLO: try the cap itself
        if good == s.max_sessions or meets(s.max_sessions):
            return SearchResult(s.max_sessions, True, dict(sorted(curve.items())))
        bad = s.max_sessions
    while bad - good > s.resolution:
        mid = (good + bad) // 2
        if meets(mid):
            good = mid
        else:
            bad = mid
    return SearchResult(good, False, dict(sorted(curve.items())))
