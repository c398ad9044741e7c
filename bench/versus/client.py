"""The replay over HTTP: each planned session against one server, every request timed.

Sessions start at their planned offsets (Poisson); a session's turns run one
after another, each after its tool gap past the previous turn's last token.
Every request is `/v1/completions` over token ids, greedy, streamed with
usage, `ignore_eos` so every server generates the planned `max_tokens`. A
record per request: TTFT (first chunk with a token), E2E (last chunk),
prompt and cached tokens from the usage, or the error. `raw_prefill` is the
cold-prefill figure: a fresh `n`-token prompt, one output token.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import numpy as np

from bench.client import async_client, completion_body, stream_completion
from bench.net import usage_tokens
from bench.versus.plan import Plan, PlannedSession


@dataclass
class Record:
    session: str
    turn: int
    sent_s: float  # since the run began
    prompt_len: int  # what was sent
    ttft_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int = 0  # the server's usage
    cached_tokens: int = 0
    completion_tokens: int = 0
    miss_tokens: dict[str, int] = field(default_factory=dict)  # Penelope's ledger, by cause
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def body(model: str, prompt: list[int] | tuple[int, ...], max_tokens: int) -> dict[str, Any]:
    return completion_body(model, prompt, max_tokens, ignore_eos=True)


async def stream_one(
    http: httpx.AsyncClient, payload: dict[str, Any], rec: Record, session: str
) -> None:
    """Send one streamed request and fill `rec`'s times and usage (or its error)."""
    try:
        got = await stream_completion(http, payload, {"x-session-id": session})
    except httpx.HTTPError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
        return
    rec.ttft_s, rec.e2e_s = got.first_token_s, got.last_token_s
    if got.usage:
        rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens = usage_tokens(got.usage)
        rec.miss_tokens = dict((got.usage.get("penelope") or {}).get("miss_tokens") or {})
    if got.status != 200:
        rec.error = f"status {got.status}: {got.body[:200]!r}"
    elif got.error is not None:
        rec.error = f"stream error: {got.error}"
    elif rec.ttft_s is None:
        rec.error = "the stream carried no token"


async def _session(
    http: httpx.AsyncClient, model: str, s: PlannedSession, t0: float, out: list[Record]
) -> None:
    await asyncio.sleep(max(0.0, t0 + s.start_s - time.monotonic()))
    for k, turn in enumerate(s.turns):
        if k:
            await asyncio.sleep(turn.gap_s)
        rec = Record(s.id, k, time.monotonic() - t0, len(turn.prompt))
        out.append(rec)
        await stream_one(http, body(model, turn.prompt, turn.max_tokens), rec, s.id)
        if rec.error:
            return  # the session's next prompt would extend a turn that did not run


async def _replay(url: str, model: str, plan: Plan, timeout_s: float) -> tuple[list[Record], float]:
    out: list[Record] = []
    async with async_client(url, timeout_s, len(plan.sessions) + 4) as http:
        t0 = time.monotonic()
        await asyncio.gather(*(_session(http, model, s, t0, out) for s in plan.sessions))
        wall = time.monotonic() - t0
    return sorted(out, key=lambda r: r.sent_s), wall


def replay(url: str, model: str, plan: Plan, timeout_s: float) -> tuple[list[Record], float]:
    """Every planned session against `url`; the records (by send time) and the wall time."""
    return asyncio.run(_replay(url, model, plan, timeout_s))


async def _one(
    url: str, model: str, prompt: list[int], max_tokens: int, timeout_s: float
) -> Record:
    rec = Record("raw", 0, 0.0, len(prompt))
    async with async_client(url, timeout_s) as http:
        await stream_one(http, body(model, prompt, max_tokens), rec, f"raw-{id(rec)}")
    return rec


def raw_prefill(
    url: str, model: str, n: int, repeats: int, seed: int, low: int, high: int, timeout_s: float
) -> dict[str, Any]:
    """Median TTFT of `repeats` fresh `n`-token prompts (nothing cached), one token each."""
    rng = np.random.default_rng([seed, n, 7919])
    asyncio.run(_one(url, model, [int(x) for x in rng.integers(low, high, 32)], 2, timeout_s))
    ttfts, errors = [], []
    for _ in range(repeats):
        prompt = [int(x) for x in rng.integers(low, high, n)]
        rec = asyncio.run(_one(url, model, prompt, 1, timeout_s))
        if rec.error or rec.ttft_s is None:
            errors.append(rec.error)
        else:
            ttfts.append(rec.ttft_s)
    return {
        "prompt_tokens": n,
        "ttft_s": statistics.median(ttfts) if ttfts else None,
        "runs_s": ttfts,
        "errors": errors,
    }
