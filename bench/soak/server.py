"""The soak bench's server side (this process): the standalone server, the state sampler, slopes.

`run_soak` serves the OpenAI API (the app of `penelope serve`, with a store in
a temp dir) on a free local port, runs the client (`bench.soak.client`) in a
spawned process under a deadline (`bench.child.run_child`) and meanwhile
samples the server's state: resident memory and every count that must stay
bounded (session records, tree nodes, pages per tier, store bytes, path
records, retention gaps, handover sessions). After warm-up each series gets
a least-squares slope against requests finished (reported); a count is flat
when the medians of the first and last quarters of the post-warm-up samples
differ by at most `max(2, 5 %)` (records are swept every 256 requests: a
sawtooth, not a drift), and memory when its end is within 5 % of its
warm-up level.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.child import run_child
from bench.load.server import engine_levers, page_report, wait_idle
from bench.sampler import Sampler, cpu_fields, rss_mib
from bench.soak.client import client_deadline_s, client_main
from bench.soak.config import MODEL, SoakConfig

SERIES = (
    "rss_mib",
    "session_records",
    "tree_nodes",
    "pages_device",
    "pages_host",
    "store_bytes",
    "path_records",
    "retention_gaps",
    "handover_sessions",
)
PER = 10_000  # slopes are per this many requests
TRIES = 3  # a sample that races the engine thread (a dict resized) is taken again
CRITERION = {
    "counts": "flat when the medians of the first and last quarters of the post-warm-up "
    "samples differ by at most max(2, 0.05 x the first)",
    "rss_mib": "flat when |level_end - level_at_warmup| <= 0.05 x level_at_warmup",
}


def read_state(backend: Any, store_dir: Path) -> dict[str, Any]:
    """One reading of the server's state (the engine may be stepping meanwhile).

    Only `len()` and attribute reads of the engine's containers: iterating one
    the engine thread is changing could raise.
    """
    async_engine = backend.engine  # read each time: a restarted engine replaces it
    footprint = async_engine.engine.inspect().footprint()
    stats = async_engine.stats()
    store = async_engine.store_stats()
    return {
        "requests": footprint["requests"],
        "rss_mib": round(rss_mib(), 1),
        "session_records": stats.session_records,
        "tree_nodes": stats.tree_nodes,
        "pages_device": stats.pages_device_used,
        "pages_host": stats.pages_host_used,
        "store_bytes": store.used_bytes if store is not None else None,
        "path_records": sum(1 for _ in store_dir.rglob("records/*.json")),
        "retention_gaps": footprint["retention_gaps"],
        "handover_sessions": footprint["handover_sessions"],
    }


class StateSampler(Sampler):
    """`read_state` every `period_s`, each with `t_s` (seconds since start)."""

    def __init__(self, backend: Any, store_dir: Path, period_s: float) -> None:
        super().__init__(period_s, "soak-sampler")
        self.backend, self.store_dir = backend, store_dir
        self.samples: list[dict[str, Any]] = []

    def sample(self) -> None:
        for attempt in range(TRIES):
            try:
                state = read_state(self.backend, self.store_dir)
            except (RuntimeError, OSError):  # a dict or directory changed under us
                if attempt == TRIES - 1:
                    raise
                continue
            self.samples.append({"t_s": round(time.monotonic() - self.t0, 2), **state})
            return


def fit(samples: list[dict[str, Any]], name: str, warmup_requests: int) -> dict[str, Any]:
    """Level at warm-up end and at the end, the slope per 10K requests after warm-up,
    and whether the series is flat (`CRITERION`)."""
    post = [s for s in samples if s["requests"] >= warmup_requests]
    if not post:
        return {"level_at_warmup": None, "level_end": None, "slope_per_10k": None, "flat": False}
    xs = np.array([s["requests"] for s in post], dtype=float)
    ys = np.array([s[name] for s in post], dtype=float)
    start, end = float(ys[0]), float(ys[-1])
    slope = float(np.polyfit(xs, ys, 1)[0]) * PER if len(set(xs)) > 1 else None
    quarter = max(1, len(ys) // 4)
    first, last = float(np.median(ys[:quarter])), float(np.median(ys[-quarter:]))
    if name == "rss_mib":
        flat = abs(end - start) <= 0.05 * start
    else:  # the quarters' medians: a sweep's sawtooth is not a drift
        flat = abs(last - first) <= max(2.0, 0.05 * first)
    return {
        "level_at_warmup": round(start, 1),
        "level_end": round(end, 1),
        "median_first_quarter": round(first, 1),
        "median_last_quarter": round(last, 1),
        "slope_per_10k": None if slope is None else round(slope, 3),
        "flat": bool(flat),
    }


def slopes(samples: list[dict[str, Any]], warmup_requests: int) -> dict[str, dict[str, Any]]:
    """`fit` of every series the server has (handover and store need a store)."""
    return {
        name: fit(samples, name, warmup_requests)
        for name in SERIES
        if all(s[name] is not None for s in samples)
    }


def cpu_info() -> dict[str, Any]:
    """This machine's CPU model and the vector extensions the tiny model's speed hangs on."""
    fields = cpu_fields()
    if not fields:
        return {"model": None}
    flags = set(fields.get("flags", "").split())
    extensions = {f: f in flags for f in ("avx2", "avx512f", "amx_tile")}
    return {"model": fields.get("model name"), **extensions}


def run_soak(cfg: SoakConfig) -> dict[str, Any]:
    import torch

    from deployments.api.settings import ApiSettings
    from deployments.api.standalone import background_server, standalone_app
    from penelope_engine.config import EngineConfig
    from penelope_engine.shipped import shipped_cache, shipped_scheduler

    torch.set_num_threads(cfg.threads)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="penelope-soak-") as tmp:
        cache = shipped_cache(  # what ships, at the soak's sizes
            cfg.device_pages,
            cfg.page_size,
            store_uri=tmp,
            store_bytes=cfg.store_mib << 20,
            host_pages=cfg.host_pages,
            session_ttl_s=cfg.session_ttl_s,
            store_record_ttl_s=cfg.store_record_ttl_s,
        )
        scheduler = shipped_scheduler(2048, max_running=64, device="cpu")
        engine_config = EngineConfig(model=MODEL, cache=cache, scheduler=scheduler)
        app = standalone_app(engine_config, ApiSettings(max_pending=4 * cfg.concurrency))
        with background_server(app) as url:
            backend = app.state.penelope.backend
            args = (cfg, url, backend.engine.vocab_size)
            with StateSampler(backend, Path(tmp), cfg.sample_period_s) as sampler:
                requests = run_child(
                    client_main, args, timeout_s=client_deadline_s(cfg), name="soak-client"
                )
                idle = wait_idle(backend.engine, 60.0)
            sampler.sample()  # the state once every request has ended
            end_state = page_report(backend.engine)
    fits = slopes(sampler.samples, cfg.warmup_requests)
    return {
        "bench": "soak",
        "config": {**asdict(cfg), "model": MODEL},
        "engine": engine_levers(engine_config),
        "cpu": cpu_info(),
        "elapsed_s": round(time.monotonic() - t0, 1),
        "requests": requests,
        "samples": sampler.samples,
        "criterion": CRITERION,
        "slopes": fits,
        "integrity": end_state["integrity"],
        "end_state": {**end_state, "engine_idle": idle, "engine_restarts": backend.restarts},
        "ok": requests["by_status"].get("200", 0) == requests["total"]
        and idle
        and backend.restarts == 0
        and end_state["integrity"] == "ok"
        and all(f["flat"] for f in fits.values()),
    }
