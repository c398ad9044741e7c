"""The soak bench's client, run in a spawned process: sessionless requests and sessions.

`cfg.concurrency` workers take request numbers from one counter until
`cfg.requests` have been sent or the deadline passes. Each request is a
non-streamed `/v1/completions` whose prompt is token ids: sessionless (a
fresh prompt, no `x-session-id`) or the next turn of the worker's current
session. A session has 2 to `max_turns` turns; each later turn's prompt is
the previous one plus `max_tokens` stand-ins for the reply (the API returns
text, not ids) and `NEW_TOKENS` new ones, and a session whose next prompt
would pass `max_prompt_tokens` ends early. A share of prompts starts with one
shared prefix, so the tree shares pages across sessions.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.client import async_client, completion_body
from bench.soak.config import MODEL, SoakConfig

NEW_TOKENS = 8  # new tokens in each later turn, after the reply
REQUEST_TIMEOUT_S = 120.0  # one request; a request never waits longer
CLIENT_STARTUP_S = 60.0  # a spawned interpreter importing httpx


@dataclass
class Session:
    """A worker's current session: its id, turns left after this one, this turn's prompt."""

    id: str
    turns_left: int
    prompt: list[int]


@dataclass
class Counts:
    """What the client saw: status codes, transport errors, sessions started."""

    by_status: dict[str, int] = field(default_factory=dict)
    transport_errors: int = 0
    sessionless: int = 0
    session_requests: int = 0
    sessions: int = 0

    def add(self, status: str) -> None:
        self.by_status[status] = self.by_status.get(status, 0) + 1


class Client:
    """The workers' shared state: the request counter, the shared prefix, the counts."""

    def __init__(self, cfg: SoakConfig, http: httpx.AsyncClient, vocab: int) -> None:
        self.cfg, self.http, self.vocab = cfg, http, vocab
        self.prefix = random.Random(cfg.seed).choices(range(vocab), k=cfg.prefix_tokens)
        self.counts = Counts()
        self.sent = 0
        self.end = time.monotonic() + cfg.deadline_s

    def _prompt(self, rng: random.Random) -> list[int]:
        """A first prompt of `prompt_tokens` ids; a share of them start with the shared prefix."""
        cfg = self.cfg
        head = self.prefix if rng.random() < cfg.prefix_share else []
        return head + rng.choices(range(self.vocab), k=cfg.prompt_tokens - len(head))

    def _next_turn(self, s: Session | None, worker: int, rng: random.Random) -> Session:
        """The session to send a turn of: `s` extended, or a new one when `s` is done."""
        cfg = self.cfg
        if s is not None and s.turns_left > 0:
            grown = s.prompt + rng.choices(range(self.vocab), k=cfg.max_tokens + NEW_TOKENS)
            if len(grown) <= cfg.max_prompt_tokens:
                return Session(s.id, s.turns_left - 1, grown)
        self.counts.sessions += 1
        sid = f"soak-{cfg.seed}-{worker}-{self.counts.sessions}"
        return Session(sid, rng.randint(2, cfg.max_turns) - 1, self._prompt(rng))

    async def worker(self, i: int) -> None:
        rng = random.Random(self.cfg.seed * 100_003 + i)
        session: Session | None = None
        while self.sent < self.cfg.requests and time.monotonic() < self.end:
            self.sent += 1
            if rng.random() < self.cfg.sessionless_share:
                self.counts.sessionless += 1
                await self._send(self._prompt(rng), {})
            else:
                session = self._next_turn(session, i, rng)
                self.counts.session_requests += 1
                await self._send(session.prompt, {"x-session-id": session.id})

    async def _send(self, prompt: list[int], headers: dict[str, str]) -> None:
        body = completion_body(MODEL, prompt, self.cfg.max_tokens, stream=False)
        try:
            r = await self.http.post("/v1/completions", json=body, headers=headers)
        except httpx.HTTPError as exc:
            self.counts.transport_errors += 1
            self.counts.add(f"client_error:{type(exc).__name__}")
            return
        self.counts.add(str(r.status_code))


async def drive(cfg: SoakConfig, url: str, vocab: int) -> dict[str, Any]:
    """Run every worker until the requests are sent or the deadline passes."""
    t0 = time.monotonic()
    async with async_client(url, REQUEST_TIMEOUT_S, cfg.concurrency + 4) as http:
        client = Client(cfg, http, vocab)
        tasks = [asyncio.create_task(client.worker(i)) for i in range(cfg.concurrency)]
        _, pending = await asyncio.wait(tasks, timeout=cfg.deadline_s + REQUEST_TIMEOUT_S)
        for task in pending:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    c = client.counts
    failed = [r for r in results if isinstance(r, BaseException)]
    for exc in failed:
        c.add(f"client_error:{type(exc).__name__}")
    return {
        "total": sum(c.by_status.values()),
        "by_status": dict(sorted(c.by_status.items())),
        "server_errors": sum(n for st, n in c.by_status.items() if st[:1] == "5"),
        "transport_errors": c.transport_errors + len(failed),
        "sessionless": c.sessionless,
        "session_requests": c.session_requests,
        "sessions": c.sessions,
        "deadline_hit": client.sent < cfg.requests,
        "elapsed_s": round(time.monotonic() - t0, 1),
    }


def client_main(cfg: SoakConfig, url: str, vocab: int) -> dict[str, Any]:
    """The client process's body: send the requests, return the counts."""
    return asyncio.run(drive(cfg, url, vocab))


def client_deadline_s(cfg: SoakConfig) -> float:
    """How long the client process may take: its run, the last requests, start-up."""
    return cfg.deadline_s + REQUEST_TIMEOUT_S + CLIENT_STARTUP_S + 30.0
