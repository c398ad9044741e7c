"""Our model of the peer, checked: the simulator predicts a `bench versus` run's ratio.

    python -m bench.versus.predict VERSUS.json [--cost-model COST.json] [--json OUT]

For each capacity and seed of the run it simulates (`bench.sim.loop`) the same
workload (`bench.versus.plan.workload`, the run's settings) on one replica
with the KV capacity each server read back:

* Penelope: the shipped policy and CPU scheduler (`penelope_engine.shipped`), no
  host tier, as `penelope serve --host-pages 0` runs (`--max-prefills N` as
  that server's option);
* vLLM 0.32: `lru` over the device only, FCFS. vLLM frees a finished
  request's blocks in reverse (`vllm/v1/core/single_type_kv_cache_manager.py`,
  `free`: "tail blocks are freed first"), and `BlockPool.free_blocks`
  (`vllm/v1/core/block_pool.py`) appends hashed blocks to the tail of the
  free queue and prepends unhashed ones; `get_new_blocks` pops from its head,
  dropping a cached block's hash only then, and `touch` takes a hit block out
  of the queue. So the block evicted first is the least recently released,
  tail first within one request: the simulator's `lru` (leaves, key
  (last access, -start), tail first, `penelope_engine.cache.eviction.LruPolicy`).
  It hits at most `prompt - 1` tokens, full blocks only, as the simulator does.

The cost model is the CPU one `bench replay --calibrate` fits (`CpuCostModel`,
here from `--cost-model` or fitted now by `bench.replay.calibrate`'s timing
sweep on the run's model); vLLM's step costs are that model's times the
measured ratio of the two servers' cold-prefill TTFT (the raw-speed figure
of the same run), so the simulation differs between the two only in the
cache, the scheduler and that one speed factor. Reported: simulated and
measured mean TTFT ratio (Penelope / vLLM) and the error.

`--policies oracle,lru,...` is the ablation: Penelope's side again with each of
those eviction policies in place of the shipped one (`oracle` reads the future:
the best any victim choice could do), each row's `sim_ratio_by_policy`.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

from bench.sim.config import SimConfig
from bench.sim.costmodel import CpuCostModel
from bench.sim.loop import simulate
from bench.sim.oracle import SIM_EVICTION_POLICIES
from bench.versus.config import ServerSpec, VersusConfig
from bench.versus.plan import workload
from penelope_engine.config import SchedulerConfig
from penelope_engine.shipped import SHIPPED_POLICY, shipped_scheduler

# vLLM 0.32's OpenAI server on a CPU: max_num_batched_tokens 2048, max_num_seqs 128
# (`vllm/engine/arg_utils.py`, `get_batch_defaults`, `current_platform.is_cpu()`)
VLLM_CPU_BATCHED_TOKENS = 2048
VLLM_CPU_MAX_SEQS = 128


def scaled(cost: CpuCostModel, factor: float) -> CpuCostModel:
    return dataclasses.replace(
        cost,
        c_step=cost.c_step * factor,
        c_lin=cost.c_lin * factor,
        c_attn=cost.c_attn * factor,
        c_seq=cost.c_seq * factor,
        c_row=cost.c_row * factor,
        row_costs=tuple(c * factor for c in cost.row_costs),
    )


def fit_here(model: str, page_size: int) -> CpuCostModel:
    """`bench replay --calibrate`'s fit, on this machine, for `model` (a small sweep)."""
    from bench.replay.calibrate import SweepConfig, fit_cpu_cost, timing_sweep
    from penelope_engine.model.registry import load_model

    lm = load_model(model)
    sweep = SweepConfig(offsets=(0, 512), chunks=(16, 256), decode_contexts=(256,),
                        decode_batches=(1, 2, 4), repeats=1)  # fmt: skip
    # several prefills at once, so that the sweep's decodes batch as it asks
    batched = dataclasses.replace(shipped_scheduler(device="cpu"), max_prefills=0)
    samples = timing_sweep(lm, page_size, batched, sweep)
    c = lm.config
    kv_bytes = 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4
    return fit_cpu_cost(samples, kv_bytes)


def _config(doc: dict[str, Any]) -> VersusConfig:
    c = doc["config"]
    skip = {"servers", "trace", "out_dir", "kv_tokens"}  # the workload's settings only
    fields = {f.name for f in dataclasses.fields(VersusConfig)} - skip
    kw: dict[str, Any] = {
        k: (tuple(v) if isinstance(v, list) else v) for k, v in c.items() if k in fields
    }
    return VersusConfig((ServerSpec("x", "http://x"),), trace=Path(c["trace"]), **kw)


def predict(
    doc: dict[str, Any],
    cost: CpuCostModel,
    ours: str,
    peer: str,
    policies: tuple[str, ...] = (),
    max_prefills: int | None = None,
    seeds: tuple[int, ...] = (),
    speed_factor: float | None = None,
) -> list[dict[str, Any]]:
    """One row per (capacity, seed) the run measured both servers at, and per capacity
    and extra `seeds` (simulated only: `measured_ratio` None), with the ablation.
    `speed_factor`: the peer's step costs x this instead of the run's measured ratio of
    cold-prefill TTFTs (another CPU's, as a what-if: its rows have no measured ratio)."""
    cfg = _config(doc)
    raw = doc["raw_prefill_ttft_s"]
    factor = raw[peer] / raw[ours] if speed_factor is None else speed_factor
    runs = {(r["server"], r["kv_tokens"], r["seed"]): r for r in doc["runs"]}
    ours_scheduler = shipped_scheduler(device="cpu")
    if max_prefills is not None:
        ours_scheduler = dataclasses.replace(ours_scheduler, max_prefills=max_prefills)
    pairs = {(kv, seed): (r, runs[peer, kv, seed]) for (name, kv, seed), r in runs.items()
             if name == ours and (peer, kv, seed) in runs}  # fmt: skip
    for kv, seed in list(pairs):
        for extra in seeds:
            pairs.setdefault((kv, extra), (pairs[kv, seed][0], pairs[kv, seed][1]))
    out = []
    for (kv, seed), (r, p) in sorted(pairs.items(), key=lambda x: (x[0][0] or 0, x[0][1])):
        measured = r["seed"] == seed and speed_factor is None  # a what-if is not compared
        wl, _ = workload(cfg, seed)
        page = cfg.block_tokens
        pen = SimConfig(SHIPPED_POLICY, "gpu", device_budget_tokens=r["kv_capacity"]["tokens"],
                        page_size=page, scheduler=ours_scheduler)  # fmt: skip
        step = VLLM_CPU_BATCHED_TOKENS
        fcfs = SchedulerConfig(step, VLLM_CPU_MAX_SEQS, step)
        vll = SimConfig("lru", "gpu", device_budget_tokens=p["kv_capacity"]["tokens"],
                        page_size=page, scheduler=fcfs)  # fmt: skip
        s_ours = simulate(wl, pen, cost, seed)
        s_peer = simulate(wl, vll, scaled(cost, factor), seed)
        sim = s_ours.mean_ttft_s / s_peer.mean_ttft_s
        by_policy = {
            name: simulate(wl, dataclasses.replace(pen, policy=name), cost, seed).mean_ttft_s
            / s_peer.mean_ttft_s
            for name in policies
        }
        # one lever at a time: the schedule that ships on CUDA (several prefills at once, aged
        # order) in place of the CPU's; vLLM at our raw speed; both
        cuda = dataclasses.replace(pen, scheduler=shipped_scheduler(device="cuda"))
        s_cuda = simulate(wl, cuda, cost, seed)
        s_even = simulate(wl, vll, cost, seed)
        ablation = {
            "cuda schedule": s_cuda.mean_ttft_s / s_peer.mean_ttft_s,
            "equal raw speed": s_ours.mean_ttft_s / s_even.mean_ttft_s,
            "cuda schedule, equal raw speed": s_cuda.mean_ttft_s / s_even.mean_ttft_s,
        }
        meas = r["summary"]["mean_ttft_s"] / p["summary"]["mean_ttft_s"] if measured else None
        out.append({
            "kv_tokens": kv, "seed": seed, "speed_factor": factor,
            "sim_mean_ttft_s": {ours: s_ours.mean_ttft_s, peer: s_peer.mean_ttft_s},
            "sim_hit_ratio": {ours: s_ours.hit_ratio, peer: s_peer.hit_ratio},
            "sim_ratios": {"mean_ttft": sim, "p90_ttft": s_ours.p90_ttft_s / s_peer.p90_ttft_s,
                           "mean_jct": s_ours.mean_jct_s / s_peer.mean_jct_s},
            "measured_mean_ttft_s": {ours: r["summary"]["mean_ttft_s"],
                                     peer: p["summary"]["mean_ttft_s"]} if measured else None,
            "sim_ratio": sim, "measured_ratio": meas,
            "error": sim / meas - 1 if meas else None,
            "sim_ratio_by_policy": by_policy, "sim_ablation": ablation,
        })  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    from penelope_cli.helpformat import parser

    ap = parser("python -m bench.versus.predict", __doc__)
    ap.add_argument("versus", type=Path, help="a `bench versus` JSON")
    ap.add_argument(
        "--cost-model",
        type=Path,
        default=None,
        help="CpuCostModel JSON (describe()); default: fit it here now",
    )
    ap.add_argument("--model", default="smollm2-135m", help="the model to fit the cost on")
    ap.add_argument("--ours", default="penelope", help="our server's name in the run")
    ap.add_argument("--peer", default="vllm", help="the peer's name in the run")
    ap.add_argument("--json", type=Path, default=None, help="write the result here")
    names = ", ".join(SIM_EVICTION_POLICIES)
    ap.add_argument(
        "--policies", default="", help=f"ablation: our side again with these policies ({names})"
    )
    ap.add_argument(
        "--max-prefills",
        type=int,
        default=None,
        help="our server's `penelope serve --max-prefills` (default: as it ships on a CPU)",
    )
    ap.add_argument(
        "--seeds",
        type=lambda t: tuple(int(x) for x in t.split(",") if x),
        default=(),
        help="seeds to simulate beside the run's (comma list; no measured ratio for them)",
    )
    ap.add_argument(
        "--speed-factor",
        type=float,
        default=None,
        help="the peer's step costs x this (default: the run's cold-prefill TTFT ratio, "
        "peer / ours); another CPU's ratio, as a what-if",
    )
    args = ap.parse_args(argv)  # fmt: skip
    policies = tuple(p for p in args.policies.split(",") if p)
    for name in policies:
        SIM_EVICTION_POLICIES.check(name)
    doc = json.loads(args.versus.read_text())
    if args.cost_model is not None:
        cost = CpuCostModel.from_dict(json.loads(args.cost_model.read_text()))
    else:
        cost = fit_here(args.model, doc["config"]["block_tokens"])
    rows = predict(
        doc, cost, args.ours, args.peer, policies, args.max_prefills, args.seeds, args.speed_factor
    )
    for r in rows:
        by = "".join(f", {k} {v:.2f}x" for k, v in r["sim_ratio_by_policy"].items())
        by += "".join(f", {k} {v:.2f}x" for k, v in r["sim_ablation"].items())
        q = r["sim_ratios"]
        meas = (f"measured {r['measured_ratio']:.2f}x, error {100 * r['error']:+.0f} %"
                if r["measured_ratio"] else "not measured")  # fmt: skip
        print(f"kv {r['kv_tokens']} seed {r['seed']}: simulated {r['sim_ratio']:.2f}x "
              f"(p90 {q['p90_ttft']:.2f}x, JCT {q['mean_jct']:.2f}x), {meas}{by}")  # fmt: skip
    errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    if errors:
        print(f"mean |error| {100 * statistics.mean(errors):.0f} %")
    if args.json is not None:
        args.json.write_text(json.dumps({"cost_model": cost.describe(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
