"""The side bench's client, run in a spawned process: the planned sessions over HTTP.

Each session starts at its planned time and sends its turns one after the
other, each after its planned tool gap (closed loop, as an agent waits for the
answer), as a streamed `/v1/completions` with `stream_options.include_usage`
and the session in `x-session-id`. A record per request: status, time to the
first chunk with a choice (TTFT), latency, prompt and cached tokens from the
usage chunk (`prompt_tokens_details.cached_tokens`, which is Penelope's device
+ host + store), and the `x-penelope-replica` that answered. `summarize` turns
one set-up's records into its entry of the result.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from bench.side.plan import SessionPlan, TurnPlan

CLIENT_STARTUP_S = 60.0  # a spawned interpreter importing httpx and numpy, with margin


@dataclass(frozen=True)
class Record:
    session: str
    turn: int
    status: str  # "200", another HTTP status, "error:<code>", "client_error:<type>", ...
    ttft_s: float | None
    latency_s: float
    prompt_tokens: int | None  # from the usage chunk; None when there was none
    cached_tokens: int | None
    replica: str


async def _turn(http: httpx.AsyncClient, model: str, sid: str, k: int, t: TurnPlan) -> Record:
    body = {
        "model": model,
        "prompt": t.prompt,
        "max_tokens": t.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.monotonic()
    ttft: float | None = None
    usage: dict[str, Any] = {}
    status, replica = "client_error:none", ""
    try:
        async with http.stream(
            "POST", "/v1/completions", json=body, headers={"x-session-id": sid}
        ) as r:
            replica = r.headers.get("x-penelope-replica", "")
            status = str(r.status_code)
            if r.status_code != 200:
                await r.aread()
            else:
                status = "200+truncated"
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        status = "200" if status == "200+truncated" else status
                        break
                    event = json.loads(line[6:])
                    if "error" in event:
                        status = "error:" + str(event["error"].get("code"))
                    elif event.get("choices") and ttft is None:
                        ttft = time.monotonic() - t0
                    usage = event.get("usage") or usage
    except httpx.HTTPError as exc:
        status = f"client_error:{type(exc).__name__}"
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return Record(
        sid, k, status, ttft, time.monotonic() - t0, usage.get("prompt_tokens"), cached, replica
    )


async def _session(
    http: httpx.AsyncClient, model: str, plan: SessionPlan, t0: float, out: list[Record]
) -> None:
    await asyncio.sleep(max(0.0, t0 + plan.start_s - time.monotonic()))
    for k, turn in enumerate(plan.turns):
        await asyncio.sleep(turn.think_s)
        out.append(await _turn(http, model, plan.id, k, turn))


async def drive(
    plans: Sequence[SessionPlan], url: str, model: str, timeout_s: float
) -> list[Record]:
    """Every session; what has not finished within `timeout_s` is recorded as unfinished."""
    records: list[Record] = []
    timeout = httpx.Timeout(timeout_s, connect=30)
    limits = httpx.Limits(max_connections=2 * len(plans) + 4, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as http:
        t0 = time.monotonic()
        tasks = [asyncio.create_task(_session(http, model, p, t0, records)) for p in plans]
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    sent = {(r.session, r.turn) for r in records}
    records += [
        Record(p.id, k, "unfinished", None, 0.0, None, None, "")
        for p in plans
        for k in range(len(p.turns))
        if (p.id, k) not in sent
    ]
    failed = [t.exception() for t in done if t.exception() is not None]
    records += [Record("", -1, f"client_error:{type(e).__name__}", None, 0.0, None, None, "")
                for e in failed]  # fmt: skip
    return records


def client_main(
    plans: Sequence[SessionPlan], url: str, model: str, timeout_s: float
) -> list[Record]:
    """The client process's body."""
    return asyncio.run(drive(plans, url, model, timeout_s))


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def summarize(router: str, records: Sequence[Record]) -> dict[str, Any]:
    """One set-up's entry: TTFT mean and p90 over answered requests, hit ratio, failures."""
    ok = [r for r in records if r.status == "200" and r.ttft_s is not None]
    ttft = np.array([r.ttft_s for r in ok], dtype=float)
    counted = [r for r in ok if r.prompt_tokens and r.cached_tokens is not None]
    prompt = sum(r.prompt_tokens or 0 for r in counted)
    cached = sum(r.cached_tokens or 0 for r in counted)
    replicas: dict[str, set[str]] = {}
    for r in ok:
        replicas.setdefault(r.session, set()).add(r.replica)
    return {
        "router": router,
        "mean_ttft_s": _round(float(ttft.mean())) if len(ttft) else None,
        "p90_ttft_s": _round(float(np.percentile(ttft, 90))) if len(ttft) else None,
        "requests": len(records),
        "failed": len(records) - len(ok),
        "hit_ratio": _round(cached / prompt) if prompt else None,
        "mean_latency_s": _round(float(np.mean([r.latency_s for r in ok]))) if ok else None,
        "sessions_on_one_replica": sum(1 for s in replicas.values() if len(s) == 1 and "" not in s),
        "statuses": {
            s: sum(1 for r in records if r.status == s) for s in sorted({r.status for r in records})
        },
    }
