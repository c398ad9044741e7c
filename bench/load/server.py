"""The load bench's server side (this process): the standalone server, memory, pages.

`run_load` serves the OpenAI API on a free local port, runs the client
(`bench.load.client`) in a spawned process under a deadline
(`bench.child.run_child`), samples this process's resident memory meanwhile,
then checks that the engine is idle with no page held and no node locked.
"""

from __future__ import annotations

import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from bench.child import run_child
from bench.load.client import client_deadline_s, client_main, summarize
from bench.load.config import MODEL, LoadConfig
from bench.sampler import Sampler, rss_mib
from bench.traces import CLAUDE_BLOCK
from penelope_engine.config import EngineConfig
from penelope_engine.protocol import EngineProtocol


class RssSampler(Sampler):
    """This process's resident memory, sampled on a thread: (seconds since start, MiB).

    `pool_full`, when given, is polled with each sample; the first time it is
    true is recorded as `full_at` (seconds since start).
    """

    def __init__(self, period_s: float = 0.5, pool_full: Callable[[], bool] | None = None) -> None:
        super().__init__(period_s, "rss-sampler")
        self.samples: list[tuple[float, float]] = []
        self.full_at: float | None = None
        self._pool_full = pool_full

    def sample(self) -> None:
        rss = rss_mib()
        now = time.monotonic() - self.t0
        self.samples.append((now, rss))
        if self.full_at is None and self._pool_full is not None and self._pool_full():
            self.full_at = now

    def summary(self, warmup_s: float) -> dict[str, Any]:
        warmup_s = max(warmup_s, self.full_at if self.full_at is not None else 0.0)
        at_warmup = next((m for t, m in self.samples if t >= warmup_s), self.samples[-1][1])
        after = [m for t, m in self.samples if t >= warmup_s] or [at_warmup]
        growth = after[-1] - at_warmup
        return {
            "rss_mib_after_warmup": round(at_warmup, 1),
            "rss_mib_end": round(after[-1], 1),
            "rss_mib_peak": round(max(m for _, m in self.samples), 1),
            "rss_mib_peak_after_warmup": round(max(after), 1),
            "growth_after_warmup_mib": round(growth, 1),
            "rss_mib_by_quarter_after_warmup": [
                round(after[min(len(after) - 1, q * len(after) // 4)], 1) for q in range(1, 5)
            ],
            "samples": len(self.samples),
            "warmup_ends_s": round(warmup_s, 1),
            "device_pool_full_at_s": None if self.full_at is None else round(self.full_at, 1),
            "flat": growth <= max(64.0, 0.05 * at_warmup),  # the criterion, stated
        }


def wait_idle(engine: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = engine.stats()
        if s.running == 0 and s.queue_length == 0:
            return True
        time.sleep(0.05)
    return False


def page_report(engine: EngineProtocol) -> dict[str, Any]:
    """Pages and locks still held once every request has ended (all must be 0)."""
    try:
        engine.check_integrity()
        integrity = "ok"
    except AssertionError as exc:
        integrity = f"failed: {exc}"
    stats = engine.stats()
    return {
        "integrity": integrity,
        "request_pages": stats.request_pages,
        "locked_nodes": stats.locked_nodes,
        "device_pages_used": stats.pages_device_used,
        "device_pages_total": stats.pages_device_total,
        "hit_ratio": round(stats.hit_ratio, 4),
        "recompute_ratio": round(stats.recompute_ratio, 4),
        "evicted_pages": sum(n for _, _, n in stats.evictions),
    }


def engine_levers(engine: EngineConfig) -> dict[str, Any]:
    """What the bench's server ran: its policy, tiers and agent levers (what ships)."""
    c = engine.cache
    return {
        "policy": c.policy,
        "device_pages": c.device_pages,
        "host_pages": c.host_pages,
        "store": c.store_uri is not None,
        "prefill_chunk": engine.scheduler.prefill_chunk,
        "solo_prefill_chunk": engine.scheduler.solo_prefill_chunk,
        "agent": asdict(engine.scheduler.agent),
    }


def run_load(cfg: LoadConfig) -> dict[str, Any]:
    import torch

    from deployments.api.settings import ApiSettings
    from deployments.api.standalone import background_server, standalone_app
    from penelope_engine.shipped import shipped_cache, shipped_scheduler

    torch.set_num_threads(cfg.threads)
    store_dir = tempfile.TemporaryDirectory(prefix="penelope-load-")
    engine_config = EngineConfig(  # what ships: host tier, store, policy and levers
        model=MODEL,
        cache=shipped_cache(cfg.device_pages, cfg.page_size, store_uri=store_dir.name),
        scheduler=shipped_scheduler(2048, max_running=64, device="cpu"),
    )
    settings = ApiSettings(max_pending=4 * cfg.sessions, max_body_bytes=256 << 10)
    app = standalone_app(engine_config, settings)
    t0 = time.monotonic()
    backend_ref: list[Any] = []

    def pool_full() -> bool:
        if not backend_ref:
            return False
        stats = backend_ref[0].engine.stats()
        return stats.pages_device_used >= 0.95 * stats.pages_device_total

    try:
        with background_server(app) as url, RssSampler(pool_full=pool_full) as rss:
            backend = app.state.penelope.backend
            backend_ref.append(backend)
            vocab = backend.engine.vocab_size
            records = run_child(
                client_main, (cfg, url, vocab), timeout_s=client_deadline_s(cfg), name="load-client"
            )
            idle = wait_idle(backend.engine, 60.0)
            pages = page_report(backend.engine)
    finally:
        store_dir.cleanup()  # the server has stopped: its store writes are done
    requests = summarize(records)
    pages["leaked_pages"] = pages["request_pages"]
    scale = {**cfg.trace_scale.describe(CLAUDE_BLOCK), "token_stride": cfg.stride}
    scale["effective_length_scale"] /= cfg.stride
    memory = rss.summary(cfg.warmup_s)
    return {
        "bench": "load",
        "config": {**asdict(cfg), "model": MODEL, "scale": scale},
        "engine": engine_levers(engine_config),
        "elapsed_s": round(time.monotonic() - t0, 1),
        "requests": requests,
        "pages": {**pages, "engine_idle": idle, "engine_restarts": backend.restarts},
        "memory": memory,
        "peak_rss_mib_process": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "ok": requests["server_errors"] == 0
        and requests["transport_errors"] == 0
        and idle
        and pages["integrity"] == "ok"
        and pages["request_pages"] == 0
        and pages["locked_nodes"] == 0
        and memory["flat"],
    }
