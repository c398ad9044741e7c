"""The load bench's client, run in a spawned process: agent sessions as HTTP requests.

Each of `LoadConfig.sessions` slots replays Claude Code sessions, one
`/v1/completions` request per turn (plain, streamed, or streamed and
cancelled after the first chunk), with a share of malformed extra requests,
and records (kind, status, seconds) per request; `summarize` counts them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from bench.client import async_client, completion_body, events
from bench.load.config import MODEL, LoadConfig
from bench.sessions import Session
from bench.tokens import TokenMap
from bench.traces import load_claude_code
from penelope_engine.util import cdiv

SERVER_ERROR_CODES = ("internal_error", "engine_unavailable", "request_timeout")
CLIENT_STARTUP_S = 60.0  # a spawned interpreter importing httpx, numpy and the trace


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
        out = cdiv(session.turns[k].output_tokens, cfg.stride)
        body = completion_body(MODEL, [int(t) for t in ids], min(max(out, 1), cfg.max_tokens),
                               stream=False)  # fmt: skip
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
            async for event in events(r):
                if cancel:
                    return "cancelled"  # leaving the block drops the connection mid-stream
                if event is None:
                    return "200"
                if "error" in event:
                    return "200+error:" + event["error"]["code"]
            return "200+truncated"


def slot_sessions(sessions: Sequence[Session], slots: int) -> list[list[Session]]:
    """The sessions each of `slots` slots replays, in order: every slots-th of the trace."""
    return [list(sessions[i::slots]) for i in range(slots)]


def _slots(cfg: LoadConfig) -> list[list[Session]]:
    return slot_sessions(load_claude_code(cfg.trace, cfg.trace_scale).sessions, cfg.sessions)


async def drive(cfg: LoadConfig, url: str, vocab: int) -> list[tuple[str, str, float]]:
    """Run every slot until the deadline, then give in-flight requests `grace_s`."""
    timeout_s = cfg.duration_s + cfg.grace_s
    async with async_client(url, timeout_s, 2 * cfg.sessions + 8, idle=None) as http:
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
