"""`penelope bench agree`: the real engine and the simulator agree, request by request.

    penelope bench agree [--sessions 8] [--turns 4] [--json]

One small agent workload (real Claude Code sessions at 1/64 length, one token a
trace block; their first turns, tool gaps x0.05) runs three ways on the same
clock, the cost model's, through the same event loop (`bench.sim.loop.Simulator`):

* `engine`: the real `Engine` (tiny Qwen3, fp32, CPU) with a host tier and an
  Arrow store in a temporary directory; its scheduler, cache, tiers and model
  run as when serving, only time is simulated (`Replica.over_engine`);
* `sim`: the simulator, stepping one batch at a time;
* `sim_fast`: the simulator running decode-only stretches as one event.

Two cases: device + host + store (pages move down the tiers and come back),
and device + host alone, where host evictions drop pages and the holes are
recomputed; the cache is tight enough for both. Per request (matched by session and turn)
it compares prompt tokens by source (device, host, store, recomputed, new),
the admission order, preemptions and the times of admission, first token
and finish; `mismatches` counts requests that differ in any of them, and
the run fails unless it is 0 and the cases did load from the host and the
store and recompute holes.

Copies are part of it: the engine's tiers copy on the step thread, so each
copy (demotion, write-through, load, spill) delays the next step's forward for
every request (`bench.sim.tiers.TimedTiers`). `copies` gives, per side, the
pages of each kind of copy and the seconds the step thread spent on them; the
run fails unless both sides copied the same pages, charged the same seconds,
and those seconds are more than zero (a copy did stall a step).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from typing import Any

from bench.config import option
from bench.report import text_table
from bench.sessions import Scale
from bench.sim.config import SimConfig
from bench.sim.costmodel import CpuCostModel
from bench.sim.loop import Simulator
from bench.sim.metrics import RequestRecord
from bench.traces import DEFAULT_TRACE, load_trace
from bench.workload import Workload, WorkloadConfig, clip_workload, sample_workload
from penelope_cli.helpformat import add_config_args, parser
from penelope_engine.cache.eviction import EVICTION_POLICIES
from penelope_engine.config import (
    CacheConfig,
    EngineConfig,
    EvictionPolicyName,
    SchedulerConfig,
)
from penelope_engine.costs import C_ATTN, C_LIN

SOURCES = ("device_tokens", "host_tokens", "store_tokens", "recomputed_tokens", "new_tokens")
TIMES = ("admitted_at", "first_token_at", "finished_at")
REL_TOL = 1e-9


@dataclass(frozen=True)
class AgreeConfig:
    sessions: int = option(8, "Claude Code sessions in the workload")
    turns: int = option(4, "first turns of each session kept")
    seed: int = option(0, "workload seed")
    length_scale: float = option(1 / 64, "trace lengths x this")
    time_scale: float = option(0.05, "tool gaps x this")
    max_output_tokens: int = option(8, "output tokens per turn at most")
    policy: EvictionPolicyName = option("penelope", "eviction policy of both sides")
    page_size: int = option(16, "tokens per KV page")
    device_pages: int = option(160, "device pool pages (tight: sessions are evicted)")
    host_pages: int = option(192, "host tier pages (the store sits under it)")

    def __post_init__(self) -> None:
        if self.sessions < 1 or self.turns < 1 or self.max_output_tokens < 1:
            raise ValueError("sessions, turns and max_output_tokens must be >= 1")
        if self.host_pages < 1 or self.device_pages < 1:
            raise ValueError("agree needs a device pool and a host tier")
        EVICTION_POLICIES.check(self.policy)


def workload(cfg: AgreeConfig) -> Workload:
    trace = load_trace(DEFAULT_TRACE, Scale(cfg.length_scale, cfg.time_scale))
    wl = sample_workload(
        trace,
        WorkloadConfig(
            cfg.sessions, seed=cfg.seed, mean_interarrival_s=0.2, include_subagents=False
        ),
    )
    return clip_workload(wl, cfg.turns, cfg.max_output_tokens)


def cost_model(kv_bytes_per_token: int) -> CpuCostModel:
    """A stated CPU cost model (the tiny Qwen3's order of magnitude on this machine)."""
    return CpuCostModel(
        c_step=2e-3,
        c_lin=C_LIN,
        c_attn=C_ATTN,
        c_seq=50e-6,
        kv_bytes_per_token=kv_bytes_per_token,
        copy_bytes_per_s=2e9,
        c_row=1e-3,
    )


def scheduler_config() -> SchedulerConfig:
    # a prefill alone takes the whole step, as what ships (`shipped_scheduler`)
    return SchedulerConfig(
        max_batch_tokens=1024, prefill_chunk=512, solo_prefill_chunk=1024, max_running=8
    )


COPY_FIELDS = ("d2h_pages", "h2d_pages", "spill_pages", "install_pages", "step_copy_s")


def copies(sim: Simulator) -> dict[str, float]:
    """The pages each kind of copy moved and the step thread's copy seconds, fleet-wide."""
    stats = [asdict(rep.tiers.stats) for rep in sim.replicas]
    return {f: sum(s[f] for s in stats) for f in COPY_FIELDS}


def run_engine(
    cfg: AgreeConfig, wl: Workload, store_dir: str | None
) -> tuple[list[RequestRecord], int, dict[str, float]]:
    from penelope_engine.engine import Engine
    from penelope_engine.model.registry import load_model

    cache = CacheConfig(
        page_size=cfg.page_size,
        device_pages=cfg.device_pages,
        host_pages=cfg.host_pages,
        policy=cfg.policy,
        store_uri=store_dir,
        store_bytes=1 << 30,  # never full: the simulator's store has no budget
    )
    config = EngineConfig(model="tiny-qwen3", cache=cache, scheduler=scheduler_config())
    loaded = load_model(config.model)
    kv = loaded.config.kv_bytes_per_token(4)
    sim_cfg = sim_config(cfg, loaded.config.vocab_size, store=store_dir is not None)
    # Spills in line, as the simulator here charges them (`SimConfig.async_spills` off): the
    # engine's write-behind thread runs on the wall clock while this run's clock is virtual,
    # so a spill queued there could still be unwritten when the next arrival reads it.
    in_line = [lambda h, b: Engine(config, loaded, hooks=h, bench=replace(b, spills_behind=False))]
    sim = Simulator(wl, sim_cfg, cost_model(kv), 0, in_line)
    engine = sim.replicas[0].engine
    assert engine is not None  # a replica over a real engine
    sim.run()
    engine.check_integrity()
    engine.store.close()  # its store writes behind end before the caller removes the store
    return sim.requests, sim.failed, copies(sim)


def sim_config(
    cfg: AgreeConfig, vocab_size: int, store: bool, fast_decode: bool = False
) -> SimConfig:
    return SimConfig(
        policy=cfg.policy,
        tiers="gpu+cpu+store" if store else "gpu+cpu",
        device_budget_tokens=cfg.device_pages * cfg.page_size,
        host_budget_tokens=cfg.host_pages * cfg.page_size,
        page_size=cfg.page_size,
        scheduler=scheduler_config(),
        vocab_size=vocab_size,
        fast_decode=fast_decode,
    )


def run_sim(
    cfg: AgreeConfig, wl: Workload, vocab: int, kv: int, store: bool, fast: bool
) -> tuple[list[RequestRecord], int, dict[str, float]]:
    sim = Simulator(wl, sim_config(cfg, vocab, store, fast), cost_model(kv), 0)
    sim.run()
    for rep in sim.replicas:
        rep.cache.check_integrity(request_pages=0)
    return sim.requests, sim.failed, copies(sim)


def copies_agree(a: dict[str, float], b: dict[str, float]) -> bool:
    return all(_close(a[f], b[f]) for f in COPY_FIELDS)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(1.0, abs(a), abs(b))


def compare(ours: list[RequestRecord], theirs: list[RequestRecord]) -> list[dict[str, Any]]:
    """One entry per request that differs (or is missing on one side)."""

    def order(rs: list[RequestRecord]) -> dict[tuple[str, int], int]:
        ranked = sorted(rs, key=lambda r: (r.admitted_at, r.arrival, r.session_id, r.turn))
        return {(r.session_id, r.turn): i for i, r in enumerate(ranked)}

    a = {(r.session_id, r.turn): r for r in ours}
    b = {(r.session_id, r.turn): r for r in theirs}
    ra, rb = order(ours), order(theirs)
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if x is None or y is None:
            out.append({"request": list(key), "missing_in": "engine" if x is None else "sim"})
            continue
        diff = {
            f: [getattr(x, f), getattr(y, f)] for f in SOURCES if getattr(x, f) != getattr(y, f)
        }
        if x.preemptions != y.preemptions:
            diff["preemptions"] = [x.preemptions, y.preemptions]
        if ra[key] != rb[key]:
            diff["admission_rank"] = [ra[key], rb[key]]
        for f in TIMES:
            if not _close(getattr(x, f), getattr(y, f)):
                diff[f] = [getattr(x, f), getattr(y, f)]
        if diff:
            out.append({"request": list(key), **diff})
    return out


def totals(rs: list[RequestRecord]) -> dict[str, int]:
    t = {f: sum(getattr(r, f) for r in rs) for f in SOURCES}
    return {**t, "preemptions": sum(r.preemptions for r in rs), "requests": len(rs)}


def run_case(cfg: AgreeConfig, wl: Workload, store: bool) -> dict[str, Any]:
    from penelope_engine.model.tiny import tiny_qwen3_config

    mc = tiny_qwen3_config()
    kv = mc.kv_bytes_per_token(4)
    with tempfile.TemporaryDirectory(prefix="penelope-agree-") as store_dir:
        engine, engine_failed, engine_copies = run_engine(cfg, wl, store_dir if store else None)
    sim, sim_failed, sim_copies = run_sim(cfg, wl, mc.vocab_size, kv, store, fast=False)
    fast, fast_failed, fast_copies = run_sim(cfg, wl, mc.vocab_size, kv, store, fast=True)
    diffs, diffs_fast = compare(engine, sim), compare(engine, fast)
    copies_ok = copies_agree(engine_copies, sim_copies) and copies_agree(engine_copies, fast_copies)
    return {
        "tiers": "device+host+store" if store else "device+host",
        "requests": len(engine),
        "failed_requests": {"engine": engine_failed, "sim": sim_failed, "sim_fast": fast_failed},
        "mismatches": len(diffs) + (engine_failed != sim_failed),
        "mismatches_fast_decode": len(diffs_fast) + (engine_failed != fast_failed),
        "examples": diffs[:5],
        "examples_fast_decode": diffs_fast[:5],
        "totals": {"engine": totals(engine), "sim": totals(sim), "sim_fast": totals(fast)},
        "copies": {"engine": engine_copies, "sim": sim_copies, "sim_fast": fast_copies},
        "copies_agree": copies_ok,
    }


def run_agree(cfg: AgreeConfig) -> dict[str, Any]:
    from penelope_engine.model.tiny import tiny_qwen3_config

    wl = workload(cfg)
    cases = [run_case(cfg, wl, store=True), run_case(cfg, wl, store=False)]
    seen = {f: sum(c["totals"]["engine"][f] for c in cases) for f in SOURCES}
    exercised = all(seen[f] > 0 for f in ("host_tokens", "store_tokens", "recomputed_tokens"))
    copied = all(c["copies_agree"] for c in cases)
    stalled = all(c["copies"]["engine"]["step_copy_s"] > 0 for c in cases)
    mismatches = sum(c["mismatches"] for c in cases)
    fast = sum(c["mismatches_fast_decode"] for c in cases)
    kv = tiny_qwen3_config().kv_bytes_per_token(4)
    return {
        "bench": "agree",
        "config": {**asdict(cfg), "model": "tiny-qwen3", "cost": cost_model(kv).describe()},
        "requests": sum(c["requests"] for c in cases),
        "mismatches": mismatches,
        "mismatches_fast_decode": fast,
        "exercised_every_tier": exercised,
        "copies_agree": copied,
        "copies_stalled_steps": stalled,
        "cases": cases,
        "ok": mismatches == 0 and fast == 0 and exercised and copied and stalled,
    }


def table(r: dict[str, Any]) -> str:
    rows = [("requests", str(r["requests"]))]
    for case in r["cases"]:
        for side, t in case["totals"].items():
            parts = " / ".join(str(t[f]) for f in SOURCES)
            key = f"{case['tiers']}, {side}: device/host/store/recomputed/new"
            rows.append((key, f"{parts}, {t['preemptions']} preempted"))
        for side, c in case["copies"].items():
            key = f"{case['tiers']}, {side}: copied pages d2h/h2d/spill/install, thread s"
            pages = " / ".join(str(int(c[f])) for f in COPY_FIELDS[:-1])
            rows.append((key, f"{pages}, {c['step_copy_s']:.4f} s"))
    rows += [
        ("mismatches (engine vs sim)", str(r["mismatches"])),
        ("mismatches (engine vs sim, fast decode)", str(r["mismatches_fast_decode"])),
        ("every tier exercised", str(r["exercised_every_tier"])),
        ("copies agree (pages, step-thread seconds)", str(r["copies_agree"])),
        ("copies stalled steps", str(r["copies_stalled_steps"])),
        ("verdict", "ok" if r["ok"] else "FAILED"),
    ]
    return text_table(rows)


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope bench agree", __doc__)
    add_config_args(ap, AgreeConfig)
    ap.add_argument("--json", action="store_true", help="JSON on stdout, the table on stderr")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    as_json = args.pop("json")
    result = run_agree(replace(AgreeConfig(), **args))
    if as_json:
        print(json.dumps(result))
    print(table(result), file=sys.stderr if as_json else sys.stdout)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
