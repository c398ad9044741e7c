"""`penelope bench load`: many concurrent agent sessions against the standalone server.

    penelope bench load [--sessions 200] [--duration-s 120] [--json]

This process serves the OpenAI API (tiny Qwen3, 127.0.0.1, a free port) and
samples its own resident memory; a spawned client process replays Claude Code
sessions from data/traces, each turn a `/v1/completions` request whose
prompt is the turn's token ids (`bench.tokens.TokenMap`). Turns wait their
session's scaled tool time. A share of turns is cancelled mid-stream (the
client disconnects after the first chunk) and a share of extra requests is
malformed. Once the client is done, the engine must be idle with no page
held by a request, no locked tree node and a passing integrity check.

Lengths: the trace's 64-token blocks become one token each (scale 1/64); a
`--length-scale` below that keeps every k-th token of each turn, which keeps
every turn an extension of the previous one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import httpx
import numpy as np

from bench.child import run_child
from bench.tokens import TokenMap
from bench.traces import CLAUDE_BLOCK, DEFAULT_TRACE, Scale, Session, load_claude_code

MODEL = "tiny-qwen3"
SERVER_ERROR_CODES = ("internal_error", "engine_unavailable", "request_timeout")
CLIENT_STARTUP_S = 60.0  # a spawned interpreter importing httpx, numpy and the trace


@dataclass(frozen=True)
class LoadConfig:
    sessions: int = 200  # concurrent session slots; a slot that runs out starts the next session
    duration_s: float = 120.0  # no turn starts after this; in-flight requests get `grace_s`
    length_scale: float = 1 / 256
    time_scale: float = 0.1  # tool times x this
    max_tokens: int = 16
    stream_share: float = 0.5
    cancel_share: float = 0.1
    malformed_share: float = 0.05
    ramp_s: float = 10.0  # slot i starts at i * ramp_s / sessions
    # Memory is compared between the end of warm-up and the end of the run. Warm-up
    # lasts at least this long and until the device pool is first full: the tree
    # and its page tables grow while the cache fills, then must stay flat.
    warmup_s: float = 30.0
    grace_s: float = 60.0
    device_pages: int = 8192
    page_size: int = 16
    threads: int = 1
    seed: int = 0
    trace: str = str(DEFAULT_TRACE)

    def __post_init__(self) -> None:
        if self.sessions < 1 or self.duration_s <= 0 or self.max_tokens < 1:
            raise ValueError("sessions, duration_s and max_tokens must be positive")
        if not 0 < self.length_scale <= 1 or self.time_scale <= 0:
            raise ValueError("length_scale must be in (0, 1] and time_scale positive")
        for share in (self.stream_share, self.cancel_share, self.malformed_share):
            if not 0 <= share <= 1:
                raise ValueError(f"shares must be in [0, 1], got {share}")

    @property
    def trace_scale(self) -> Scale:
        return Scale(max(self.length_scale, 1 / CLAUDE_BLOCK), self.time_scale)

    @property
    def stride(self) -> int:
        """Keep every stride-th token: the part of the length scale below one token per block."""
        return max(1, round(self.trace_scale.length / self.length_scale))


# -- the client (a spawned process) ---------------------------------------------------


def malformed_requests(vocab: int) -> list[tuple[str, Any]]:
    """(route, body) pairs the API must refuse with a 4xx; bytes are sent raw."""
    ok: dict[str, Any] = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2}
    return [
        ("/v1/completions", b'{"model": "tiny-qwen3", "prompt": [1, 2'),
        ("/v1/completions", {**ok, "temperature": 7}),
        ("/v1/completions", {**ok, "model": "gpt-4o"}),
        ("/v1/completions", {**ok, "prompt": [vocab + 5]}),
        ("/v1/completions", {**ok, "prompt": []}),
        ("/v1/completions", {**ok, "max_tokens": 10**9}),
        ("/v1/completions", {**ok, "n": 3}),
        ("/v1/completions", {**ok, "stop": [str(i) for i in range(10)]}),
        ("/v1/completions", {**ok, "prompt": "x" * 300_000}),  # over the body limit
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "wizard"}]}),
    ]


class Client:
    """Replays sessions; records (kind, status, seconds) per request."""

    def __init__(self, cfg: LoadConfig, http: httpx.AsyncClient, vocab: int) -> None:
        self.cfg, self.http = cfg, http
        self.tokens = TokenMap(vocab)
        self.bad = malformed_requests(vocab)
        self.records: list[tuple[str, str, float]] = []
        self.end = time.monotonic() + cfg.duration_s

    async def slot(self, i: int, sessions: list[Session]) -> None:
        rng = random.Random(self.cfg.seed * 100_003 + i)
        await asyncio.sleep(i * self.cfg.ramp_s / self.cfg.sessions)
        for session in sessions:
            for k, turn in enumerate(session.turns):
                await asyncio.sleep(min(turn.think_time_s, max(0.0, self.end - time.monotonic())))
                if time.monotonic() >= self.end:
                    return
                if rng.random() < self.cfg.malformed_share:
                    await self._timed("malformed", self._malformed(rng))
                await self._turn(session, k, rng)

    async def _turn(self, session: Session, k: int, rng: random.Random) -> None:
        cfg = self.cfg
        ids = self.tokens.input_ids(session, k)[:: cfg.stride]
        out = -(-session.turns[k].output_tokens // cfg.stride)
        body = {
            "model": MODEL,
            "prompt": [int(t) for t in ids],
            "max_tokens": min(max(out, 1), cfg.max_tokens),
            "temperature": 0,
        }
        headers = {"x-session-id": session.id}
        draw = rng.random()
        if draw < cfg.cancel_share:
            await self._timed("cancel", self._stream(body, headers, cancel=True))
        elif draw < cfg.cancel_share + cfg.stream_share:
            await self._timed("stream", self._stream(body, headers, cancel=False))
        else:
            await self._timed("plain", self._plain("/v1/completions", body, headers))

    async def _timed(self, kind: str, request: Any) -> None:
        t0 = time.monotonic()
        try:
            status = await request
        except httpx.HTTPError as exc:
            status = f"client_error:{type(exc).__name__}"
        self.records.append((kind, status, time.monotonic() - t0))

    async def _plain(self, route: str, body: Any, headers: dict[str, str]) -> str:
        if isinstance(body, bytes):
            r = await self.http.post(route, content=body, headers=headers)
        else:
            r = await self.http.post(route, json=body, headers=headers)
        return str(r.status_code)

    async def _malformed(self, rng: random.Random) -> str:
        route, body = rng.choice(self.bad)
        return await self._plain(route, body, {"content-type": "application/json"})

    async def _stream(self, body: dict[str, Any], headers: dict[str, str], cancel: bool) -> str:
        async with self.http.stream(
            "POST", "/v1/completions", json={**body, "stream": True}, headers=headers
        ) as r:
            if r.status_code != 200:
                await r.aread()
                return str(r.status_code)
            last = ""
            async for line in r.aiter_lines():
                if cancel and line.startswith("data: "):
                    return "cancelled"  # leaving the block drops the connection mid-stream
                last = line or last
                if line.startswith('data: {"error"'):
                    return "200+error:" + json.loads(line[6:])["error"]["code"]
            return "200" if last == "data: [DONE]" else "200+truncated"


def _slots(cfg: LoadConfig) -> list[list[Session]]:
    trace = load_claude_code(cfg.trace, cfg.trace_scale)
    sessions = list(trace.sessions)
    return [sessions[i :: cfg.sessions] for i in range(cfg.sessions)]


async def drive(cfg: LoadConfig, url: str, vocab: int) -> list[tuple[str, str, float]]:
    """Run every slot until the deadline, then give in-flight requests `grace_s`."""
    # Idle connections expire on the client before uvicorn's 5 s keep-alive closes
    # them, or a request sent on a connection the server is closing fails to read.
    limits = httpx.Limits(
        max_connections=2 * cfg.sessions + 8, max_keepalive_connections=None, keepalive_expiry=2.0
    )
    timeout = httpx.Timeout(cfg.duration_s + cfg.grace_s, connect=30)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as http:
        client = Client(cfg, http, vocab)
        tasks = [asyncio.create_task(client.slot(i, s)) for i, s in enumerate(_slots(cfg))]
        done, pending = await asyncio.wait(tasks, timeout=cfg.duration_s + cfg.grace_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        client.records += [("any", "unfinished", 0.0)] * len(pending)
        failed = [t.exception() for t in done if t.exception() is not None]
        client.records += [("any", f"client_error:{type(e).__name__}", 0.0) for e in failed]
        return client.records


def client_main(cfg: LoadConfig, url: str, vocab: int) -> list[tuple[str, str, float]]:
    """The client process's body: replay the sessions, return the records."""
    return asyncio.run(drive(cfg, url, vocab))


def client_deadline_s(cfg: LoadConfig) -> float:
    """How long the client may take: its run, the in-flight grace, start-up and a margin."""
    return cfg.duration_s + cfg.ramp_s + cfg.grace_s + CLIENT_STARTUP_S


# -- the server side (this process) ---------------------------------------------------


class RssSampler:
    """This process's resident memory, sampled on a thread: (seconds since start, MiB).

    `pool_full`, when given, is polled with each sample; the first time it is
    true is recorded as `full_at` (seconds since start).
    """

    def __init__(self, period_s: float = 0.5, pool_full: Callable[[], bool] | None = None) -> None:
        self.samples: list[tuple[float, float]] = []
        self.full_at: float | None = None
        self._pool_full = pool_full
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        page = resource.getpagesize()
        while True:
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * page / 2**20
            now = time.monotonic() - self._t0
            self.samples.append((now, rss))
            if self.full_at is None and self._pool_full is not None and self._pool_full():
                self.full_at = now
            if self._stop.wait(self._period_s):
                return

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


def page_report(engine: Any) -> dict[str, Any]:
    """Pages and locks still held once every request has ended (all must be 0)."""
    try:
        engine.check_integrity()
        integrity = "ok"
    except AssertionError as exc:
        integrity = f"failed: {exc}"
    inner = engine.engine
    stats = engine.stats()
    return {
        "integrity": integrity,
        "request_pages": inner.scheduler.request_pages(),
        "locked_nodes": sum(1 for n in inner.cache.tree.iter_nodes() if n.lock > 0),
        "device_pages_used": stats.pages_device_used,
        "device_pages_total": stats.pages_device_total,
        "hit_ratio": round(stats.hit_ratio, 4),
        "recompute_ratio": round(stats.recompute_ratio, 4),
        "evicted_pages": sum(n for _, _, n in stats.evictions),
    }


def summarize(records: list[tuple[str, str, float]]) -> dict[str, Any]:
    by_status: dict[str, int] = {}
    by_kind: dict[str, dict[str, int]] = {}
    for kind, status, _ in records:
        by_status[status] = by_status.get(status, 0) + 1
        kind_counts = by_kind.setdefault(kind, {})
        kind_counts[status] = kind_counts.get(status, 0) + 1
    ok = np.array([s for k, st, s in records if st == "200" and k in ("plain", "stream")])
    server_errors = sum(
        n
        for st, n in by_status.items()
        if st[:1] == "5" or st.endswith(SERVER_ERROR_CODES) or st == "200+truncated"
    )
    client_errors = sum(n for st, n in by_status.items() if st.startswith("client_error"))
    bad = by_kind.get("malformed", {})
    return {
        "total": len(records),
        "by_status": dict(sorted(by_status.items())),
        "by_kind": by_kind,
        "server_errors": server_errors,
        "transport_errors": client_errors,
        "unfinished": by_status.get("unfinished", 0),
        "malformed_refused_4xx": sum(n for st, n in bad.items() if st[:1] == "4"),
        "latency_s": {
            "count": len(ok),
            "p50": round(float(np.percentile(ok, 50)), 3) if len(ok) else None,
            "p99": round(float(np.percentile(ok, 99)), 3) if len(ok) else None,
        },
    }


def run_load(cfg: LoadConfig) -> dict[str, Any]:
    import torch

    from deployments.settings import ApiSettings
    from deployments.standalone import background_server, standalone_app
    from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig

    torch.set_num_threads(cfg.threads)
    engine_config = EngineConfig(
        model=MODEL,
        cache=CacheConfig(page_size=cfg.page_size, device_pages=cfg.device_pages),
        scheduler=SchedulerConfig(max_running=64, max_batch_tokens=2048, prefill_chunk=512),
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

    with background_server(app) as url, RssSampler(pool_full=pool_full) as rss:
        backend = app.state.penelope.backend
        backend_ref.append(backend)
        vocab = backend.engine.vocab_size
        records = run_child(
            client_main, (cfg, url, vocab), timeout_s=client_deadline_s(cfg), name="load-client"
        )
        idle = wait_idle(backend.engine, 60.0)
        pages = page_report(backend.engine)
    requests = summarize(records)
    pages["leaked_pages"] = pages["request_pages"]
    scale = {**cfg.trace_scale.describe(CLAUDE_BLOCK), "token_stride": cfg.stride}
    scale["effective_length_scale"] /= cfg.stride
    memory = rss.summary(cfg.warmup_s)
    return {
        "bench": "load",
        "config": {**asdict(cfg), "model": MODEL, "scale": scale},
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


def table(r: dict[str, Any]) -> str:
    q, p, m = r["requests"], r["pages"], r["memory"]
    rows = [
        ("sessions / duration", f"{r['config']['sessions']} / {r['config']['duration_s']} s"),
        ("requests", str(q["total"])),
        *((f"  status {k}", str(v)) for k, v in q["by_status"].items()),
        ("server errors (5xx)", str(q["server_errors"])),
        ("latency p50 / p99", f"{q['latency_s']['p50']} / {q['latency_s']['p99']} s"),
        ("leaked pages / locked nodes", f"{p['request_pages']} / {p['locked_nodes']}"),
        ("integrity check", p["integrity"]),
        ("RSS after warm-up / end", f"{m['rss_mib_after_warmup']} / {m['rss_mib_end']} MiB"),
        ("RSS peak", f"{m['rss_mib_peak']} MiB"),
        ("hit / recompute ratio", f"{p['hit_ratio']} / {p['recompute_ratio']}"),
        ("verdict", "ok" if r["ok"] else "FAILED"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


_HELP = {  # one per LoadConfig field (tests/cpu/test_cli_help.py fails on a missing one)
    "sessions": "concurrent session slots; a slot that runs out starts the next session",
    "duration_s": "no turn starts after this; in-flight requests then get --grace-s",
    "length_scale": "trace lengths x this (below 1/64: every k-th token of each turn)",
    "time_scale": "tool times x this",
    "max_tokens": "cap on each request's output tokens",
    "stream_share": "share of turns streamed to the end",
    "cancel_share": "share of turns streamed and cancelled after the first chunk",
    "malformed_share": "chance of a malformed extra request before each turn",
    "ramp_s": "slot i starts at i * ramp-s / sessions",
    "warmup_s": "least warm-up before the memory baseline (and until the device pool is full)",
    "grace_s": "seconds in-flight requests get after --duration-s",
    "device_pages": "the server's device KV pages",
    "page_size": "tokens per KV page",
    "threads": "the server's torch threads",
    "seed": "seed of every slot's draws",
    "trace": "Claude Code trace file",
}


def build_parser() -> argparse.ArgumentParser:
    from penelope_engine.helpformat import parser

    d = LoadConfig()
    ap = parser("penelope bench load", __doc__)
    for name in (f.name for f in fields(LoadConfig)):
        default = getattr(d, name)
        ap.add_argument(
            f"--{name.replace('_', '-')}",
            type=type(default),
            default=default,
            help=_HELP.get(name),
        )
    ap.add_argument("--json", action="store_true", help="JSON on stdout, the table on stderr")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    as_json = args.pop("json")
    result = run_load(LoadConfig(**args))
    if as_json:
        print(json.dumps(result))
    print(table(result), file=sys.stderr if as_json else sys.stdout)
    return 0 if result["ok"] else 1
