"""The runs of a `bench versus`: per capacity and seed, each server cold and alone.

For every KV capacity (or once, as the servers run, without a sweep) and
every seed, each server in turn (the order flips from one seed to the next)
is started cold by its `--start` command, answers a short warm-up, replays
the seed's plan alone, has its cold prefill timed (the raw-speed figure),
and is stopped. A server without a command must already be up: its cache is
then not cold, which the run records.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.client import first_model
from bench.versus import client, servers
from bench.versus.config import ServerSpec, VersusConfig
from bench.versus.load import rate_prompt_tokens, scaled, time_factor
from bench.versus.plan import Plan, describe, make_plan
from bench.versus.report import summarize
from bench.versus.turns import turn_summary


def run_one(
    cfg: VersusConfig, spec: ServerSpec, plan: Plan, kv: int | None, log: Path
) -> dict[str, Any]:
    """One server, one seed's plan, one capacity: records, summary, capacity, raw speed."""
    t_start = time.monotonic()
    load_before = os.getloadavg()
    with servers.running(spec, kv or 0, cfg.block_tokens, log, cfg.startup_timeout_s) as got:
        startup_s = time.monotonic() - t_start
        model = first_model(spec.url)
        capacity = servers.kv_capacity(spec.url, got)
        version = servers.version(spec)
        warm = client.raw_prefill(
            spec.url, model, 32, 1, plan.seed + 101, cfg.vocab_low, cfg.vocab_high, 120.0
        )
        records, wall = client.replay(spec.url, model, plan, cfg.request_timeout_s)
        raw = client.raw_prefill(
            spec.url, model, cfg.raw_prompt_tokens, cfg.raw_repeats, plan.seed,
            cfg.vocab_low, cfg.vocab_high, cfg.request_timeout_s,
        )  # fmt: skip
    rows = [r.as_dict() for r in records]
    return {
        "server": spec.name,
        "url": spec.url,
        "seed": plan.seed,
        "kv_tokens": kv,
        "cold_start": bool(spec.start),
        "about": spec.about,
        "version": version,
        "command": spec.command(kv or 0, cfg.block_tokens) if spec.start else "",
        "startup_s": startup_s,
        "load_avg": {"before": load_before, "after": os.getloadavg()},  # 1, 5, 15 min
        "model": model,
        "kv_capacity": capacity,
        "working_set_tokens": plan.working_set_tokens,
        "warm_up_errors": warm["errors"],
        "summary": summarize(rows, wall),
        "turns": turn_summary(rows),
        "raw_prefill": raw,
        "records": rows,
    }


def run_all(
    cfg: VersusConfig,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Every capacity x seed x server: the runs, the runs whose server did not come up
    (recorded, and the sweep goes on: one capacity a server refuses costs only its
    cells), and each seed's plan description."""
    plans = {s: make_plan(cfg, s) for s in cfg.seeds}
    rate = service_rate(cfg, list(plans.values())) if cfg.loads else None
    runs: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    cells = [(kv, x) for kv in cfg.kv_tokens or (None,) for x in cfg.loads or (None,)]
    for kv, x in cells:
        for i, seed in enumerate(cfg.seeds):
            order = cfg.servers if i % 2 == 0 else cfg.servers[::-1]
            plan, factor = plans[seed], None
            if x is not None and rate is not None:
                factor = time_factor(plan, x, rate["tok_s"])
                plan = scaled(plan, factor)
            for spec in order:
                name = f"{spec.name}-kv{kv or 0}" + (f"-load{x:g}" if x else "") + f"-seed{seed}"
                log = cfg.out_dir / "logs" / f"{name}.log"
                try:
                    r = run_one(cfg, spec, plan, kv, log)
                    r |= {"load": x, "time_factor": factor, "service_rate": rate}
                except (servers.StartFailed, httpx.HTTPError) as exc:
                    # a server that did not come up, or went away before its replay began
                    why = f"{type(exc).__name__}: {exc}"
                    print(f"[kv {kv or '-'} seed {seed}] {spec.name}: {why}", file=sys.stderr)
                    failed.append({"server": spec.name, "seed": seed, "kv_tokens": kv, "load": x,
                                   "log": str(log), "error": why})  # fmt: skip
                    continue
                s = {k: (v if v is not None else float("nan")) for k, v in r["summary"].items()}
                print(
                    f"[kv {kv or '-'} load {x or '-'} seed {seed}] {spec.name}: "
                    f"ttft mean {s['mean_ttft_s']:.3f} "
                    f"p90 {s['p90_ttft_s']:.3f} e2e {s['mean_e2e_s']:.3f} hit {s['hit_ratio']:.2f} "
                    f"err {s['errors']} wall {s['wall_s']:.0f}s kv read back "
                    f"{r['kv_capacity'].get('tokens')} raw {r['raw_prefill']['ttft_s']}",
                    file=sys.stderr,
                    flush=True,
                )
                runs.append(r)
    return runs, failed, [describe(p) for p in plans.values()]


def service_rate(cfg: VersusConfig, plans: list[Plan]) -> dict[str, Any]:
    """The rate `--load` multiplies: `cfg.service_tok_s`, or the fastest server's prefill
    tokens/s on a cold prompt of the plans' median turn work, each server started alone
    (at the first `--kv-tokens`) and timed `raw_repeats` times."""
    n = rate_prompt_tokens(plans)
    if cfg.service_tok_s:
        return {"tok_s": cfg.service_tok_s, "prompt_tokens": n, "source": "--service-tok-s"}
    kv = cfg.kv_tokens[0] if cfg.kv_tokens else 0
    per_server: dict[str, float] = {}
    for spec in cfg.servers:
        log = cfg.out_dir / "logs" / f"{spec.name}-service-rate.log"
        with servers.running(spec, kv, cfg.block_tokens, log, cfg.startup_timeout_s):
            model = first_model(spec.url)
            raw = client.raw_prefill(
                spec.url, model, n, max(1, cfg.raw_repeats), 0, cfg.vocab_low, cfg.vocab_high,
                cfg.request_timeout_s,
            )  # fmt: skip
        if raw["ttft_s"]:
            per_server[spec.name] = n / raw["ttft_s"]
    if not per_server:
        raise RuntimeError("no server answered the service-rate prefill: --load has no rate")
    fastest = max(per_server, key=lambda k: per_server[k])
    return {"tok_s": per_server[fastest], "prompt_tokens": n, "fastest": fastest,
            "per_server_tok_s": per_server, "source": "timed"}  # fmt: skip
