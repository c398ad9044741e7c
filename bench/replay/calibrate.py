"""Calibrate the simulator on this CPU and measure how well it predicts a replay.

1. `timing_sweep` times steps of the real engine (`StepTimer`): single
   prefill chunks of m tokens at offset a (the prefix cached, so the step
   computes exactly those m tokens), prompts long enough to be chunked, and
   decode steps of b sequences at context c. Each distinct load keeps the
   median of its repeats.
2. `fit_cpu_cost` fits `CpuCostModel` to those steps; the host tier's copy
   bandwidth is measured with a page-sized tensor copy, and the output
   projection's time for 1-16 sampled rows is measured directly
   (`output_projection_costs`): on a CPU it is not linear in the rows.
3. `compare` runs `bench.sim` with that model on the very workloads, budgets
   and policies a `bench replay` run used, and reports the error of the
   simulated mean TTFT against the measured one, set-up by set-up.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bench.replay.steptimer import StepTimer
from bench.sim.config import SimConfig
from bench.sim.costmodel import CpuCostModel, StepLoad
from bench.sim.loop import simulate
from bench.sim.setups import scaled_scheduler
from bench.workload import Workload
from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.engine import Engine
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import GenerateRequest, SamplingParams

Sample = tuple[StepLoad, float]


@dataclass(frozen=True)
class SweepConfig:
    offsets: tuple[int, ...] = (0, 1024, 2048, 4096, 8192)
    chunks: tuple[int, ...] = (16, 256, 1024)
    decode_contexts: tuple[int, ...] = (256, 4096)
    decode_batches: tuple[int, ...] = (1, 2, 3, 4, 16)
    decode_tokens: int = 6
    max_decode_batch_tokens: int = 16384  # skip b x c above this
    repeats: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.decode_tokens < 2:
            raise ValueError("repeats must be >= 1 and decode_tokens >= 2")


def _drain(timer: StepTimer) -> None:
    while timer.engine.has_work():
        timer.step()


def _request(rid: str, ids: np.ndarray, max_tokens: int) -> GenerateRequest:
    return GenerateRequest(
        rid,
        tuple(int(t) for t in ids),
        SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        session_id=rid,
    )


def _one_pass(timer: StepTimer, cfg: SweepConfig, vocab: int, rng: np.random.Generator) -> None:
    engine = timer.engine
    for a in cfg.offsets:
        base = rng.integers(0, vocab, a)
        if a:
            engine.add_request(_request(f"base{a}", base, 1))
            _drain(timer)
        for m in cfg.chunks:
            ids = np.concatenate([base, rng.integers(0, vocab, m)])
            engine.add_request(_request(f"p{a}-{m}", ids, 1))
            _drain(timer)
    for c in cfg.decode_contexts:
        for b in cfg.decode_batches:
            if b * c > cfg.max_decode_batch_tokens:
                continue
            for i in range(b):
                engine.add_request(
                    _request(f"d{c}-{b}-{i}", rng.integers(0, vocab, c), cfg.decode_tokens)
                )
            _drain(timer)


def timing_sweep(
    lm: LoadedModel, page_size: int, scheduler: SchedulerConfig, cfg: SweepConfig = SweepConfig()
) -> list[Sample]:
    """Median seconds per distinct step load over `cfg.repeats` passes, each on a fresh engine."""
    need = max(max(cfg.offsets) + max(cfg.chunks), cfg.max_decode_batch_tokens)
    pages = 2 * (need // page_size + max(cfg.decode_batches) * 2)
    rng = np.random.default_rng(cfg.seed)
    times: dict[StepLoad, list[float]] = defaultdict(list)
    config = EngineConfig(cache=CacheConfig(page_size, pages, policy="lru"), scheduler=scheduler)
    for _ in range(cfg.repeats):
        timer = StepTimer(lambda hooks, bench: Engine(config, lm, hooks=hooks, bench=bench))
        _one_pass(timer, cfg, lm.config.vocab_size, np.random.default_rng(rng.integers(1 << 31)))
        for load, seconds in timer.samples:
            times[load].append(seconds)
    return [(load, statistics.median(ts)) for load, ts in times.items()]


def copy_bandwidth(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """Bytes per second of a CPU tensor copy (the host tier's page copies on a CPU engine)."""
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(repeats))
    return nbytes / best


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def output_projection_costs(
    lm: LoadedModel, max_rows: int = 16, repeats: int = 5
) -> tuple[float, ...]:
    """Median seconds of the model's output projection (lm_head) for 1..max_rows rows."""
    head = lm.model.lm_head
    weight = head.weight
    out = []
    with torch.inference_mode():
        for rows in range(1, max_rows + 1):
            x = torch.randn(rows, weight.shape[1], dtype=weight.dtype, device=weight.device)
            head(x)  # warm-up: the first call of a shape pays for its kernel choice
            run = functools.partial(head, x)
            out.append(statistics.median(_timed(run) for _ in range(repeats)))
    return tuple(out)


def fit_cpu_cost(
    samples: Sequence[Sample], kv_bytes_per_token: int, row_costs: Sequence[float] = ()
) -> CpuCostModel:
    return CpuCostModel.fit(
        samples, kv_bytes_per_token, copy_bytes_per_s=copy_bandwidth(), row_costs=row_costs
    )


def relative_errors(cost: CpuCostModel, samples: Iterable[Sample]) -> dict[str, float]:
    """Median and 90th-percentile |predicted / measured - 1| over step samples."""
    errs = np.array([abs(cost.step_time(load) / t - 1) for load, t in samples if t > 0])
    if not len(errs):
        return {"steps": 0}
    return {
        "steps": len(errs),
        "median": float(np.median(errs)),
        "p90": float(np.percentile(errs, 90)),
    }


def compare(
    replay_rows: Sequence[dict[str, Any]],
    workloads: dict[int, Workload],
    cost: CpuCostModel,
    base: SimConfig,
) -> list[dict[str, Any]]:
    """The simulator on each replayed set-up, same workloads: simulated vs measured mean TTFT.

    `base` carries what every set-up shares (page size, scheduler, vocabulary);
    each row's policy, tiers and budgets replace its fields.
    """
    out = []
    for r in replay_rows:
        cfg = _replace(base, r)
        sim = [simulate(wl, cfg, cost, seed).mean_ttft_s for seed, wl in workloads.items()]
        measured = r["per_seed"]["mean_ttft_s"]
        errs = [s / m - 1 for s, m in zip(sim, measured)]
        out.append(
            {
                "cache": r.get("cache"),
                "policy": r["policy"],
                "tiers": r["tiers"],
                "device_budget_tokens": r["device_budget_tokens"],
                "replay_mean_ttft_s": float(np.mean(measured)),
                "sim_mean_ttft_s": float(np.mean(sim)),
                "error": float(np.mean(sim) / np.mean(measured) - 1),
                "per_seed_error": errs,
                "per_seed_replay_s": list(measured),
                "per_seed_sim_s": sim,
            }
        )
    return out


def _replace(base: SimConfig, r: dict[str, Any]) -> SimConfig:
    return dataclasses.replace(
        base,
        policy=r["policy"],
        tiers=r["tiers"],
        device_budget_tokens=r["device_budget_tokens"],
        host_budget_tokens=r["host_budget_tokens"],
        scheduler=scaled_scheduler(r.get("cache"), base.scheduler),
    )


def _label(r: dict[str, Any]) -> str:
    return str(r.get("cache") or r["policy"])


def _group(r: dict[str, Any]) -> str:
    where = "caches" if r.get("cache") else r["tiers"]
    return f"{where}@{r['device_budget_tokens']}"


def ratio_agreement(comparison: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each set-up's mean TTFT over its group's first (the reference: `--caches`' first
    name, or the first policy at the same tiers and budget), measured and simulated, and
    how far the simulated ratio is from the measured one (`error`)."""
    first: dict[str, dict[str, Any]] = {}
    out = []
    for c in comparison:
        ref = first.setdefault(_group(c), c)
        if ref is c:
            continue
        replay = c["replay_mean_ttft_s"] / ref["replay_mean_ttft_s"]
        sim = c["sim_mean_ttft_s"] / ref["sim_mean_ttft_s"]
        out.append(
            {
                "setup": _label(c),
                "reference": _label(ref),
                "device_budget_tokens": c["device_budget_tokens"],
                "replay_ratio": replay,
                "sim_ratio": sim,
                "error": sim / replay - 1,
                "per_seed_replay_ratio": [
                    a / b for a, b in zip(c["per_seed_replay_s"], ref["per_seed_replay_s"])
                ],
                "per_seed_sim_ratio": [
                    a / b for a, b in zip(c["per_seed_sim_s"], ref["per_seed_sim_s"])
                ],
            }
        )
    return out


def orderings(rows: Sequence[dict[str, Any]], key: str) -> dict[str, list[str]]:
    """Set-ups from best to worst by `key`, per group (tiers and device budget, or the
    named caches at a budget)."""
    groups: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for r in rows:
        groups[_group(r)].append((r[key], _label(r)))
    return {g: [p for _, p in sorted(v)] for g, v in groups.items()}


def calibration_report(
    lm: LoadedModel,
    rows: Sequence[dict[str, Any]],
    workloads: dict[int, Workload],
    replay_steps: Sequence[Sample],
    base: SimConfig,
    kv_bytes_per_token: int,
) -> dict[str, Any]:
    """Fit on a timing sweep, simulate every replayed set-up, and compare (JSON-ready).

    `in_sample` repeats the comparison with a model fit to the replay's own
    steps: what error is left there is the simulator's batching and queueing,
    not its step times.
    """
    sweep = timing_sweep(lm, base.page_size, base.scheduler)
    row_costs = output_projection_costs(lm)
    cost = fit_cpu_cost(sweep, kv_bytes_per_token, row_costs)
    comparison = compare(rows, workloads, cost, base)
    sim_rows = [{**r, "mean_ttft_s": c["sim_mean_ttft_s"]} for r, c in zip(rows, comparison)]
    report: dict[str, Any] = {
        "cost_model": cost.describe(),
        "sweep_fit_error": relative_errors(cost, sweep),
        "replay_step_error": relative_errors(cost, replay_steps),
        "setups": comparison,
        "mean_ttft_error": _mean(c["error"] for c in comparison),
        "mean_abs_ttft_error": _mean(abs(c["error"]) for c in comparison),
        "ratios": ratio_agreement(comparison),
        "replay_order": orderings(rows, "mean_ttft_s"),
        "sim_order": orderings(sim_rows, "mean_ttft_s"),
    }
    if len(replay_steps) >= 5:  # a recalibration from a saved replay has no steps
        own = fit_cpu_cost(replay_steps, kv_bytes_per_token, row_costs)
        in_sample = compare(rows, workloads, own, base)
        report["in_sample"] = {
            "cost_model": own.describe(),
            "replay_step_error": relative_errors(own, replay_steps),
            "setups": in_sample,
            "mean_ttft_error": _mean(c["error"] for c in in_sample),
        }
    return report


def _mean(xs: Iterable[float]) -> float:
    vals = list(xs)
    return float(sum(vals) / len(vals))


def format_calibration(cal: dict[str, Any]) -> str:
    lines = ["\ncalibration: simulator (CPU cost model fit on this machine) vs measured replay"]
    for c in cal["setups"]:
        lines.append(
            f"  {_label(c):>14} {c['tiers']:>8} {c['device_budget_tokens']:>7}: replay "
            f"{c['replay_mean_ttft_s']:.3f}s  sim {c['sim_mean_ttft_s']:.3f}s  "
            f"error {100 * c['error']:+.1f}%"
        )
    steps = cal["replay_step_error"]
    lines.append(
        f"  mean TTFT error {100 * cal['mean_ttft_error']:+.1f}% "
        f"(mean |error| {100 * cal['mean_abs_ttft_error']:.1f}%)"
        + (
            f"; step-time error on the replay's steps: median {100 * steps['median']:.1f}%"
            if steps.get("steps")
            else ""
        )
    )
    own = cal.get("in_sample")
    if own is not None:
        lines.append(
            f"  with a model fit to the replay's own steps: mean TTFT error "
            f"{100 * own['mean_ttft_error']:+.1f}% (step error median "
            f"{100 * own['replay_step_error'].get('median', 0):.1f}%)"
        )
    for q in cal.get("ratios", ()):
        lines.append(
            f"  {q['setup']} / {q['reference']} mean TTFT: replay {q['replay_ratio']:.3f}x  "
            f"sim {q['sim_ratio']:.3f}x  ratio error {100 * q['error']:+.1f}%"
        )
    lines.append(f"  order by mean TTFT: replay {cal['replay_order']}  sim {cal['sim_order']}")
    return "\n".join(lines)
