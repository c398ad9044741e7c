"""The faults bench's load: `concurrency` slots of multi-turn agent sessions, timed.

Each slot runs seeded sessions from `data/traces` (`bench.plan`: text
prompts that extend turn by turn, greedy, streamed) one after another, turn
by turn, until the load's end; a slot that runs out of sessions starts its
first again under a new session id. Every turn is recorded with its start,
its time to first token and how it ended. A 429 or 503 that carries
`Retry-After` is waited out and sent again (documented backpressure); any
other 5xx, an error event, a stream without `[DONE]` or a turn past its
deadline is a failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from bench.client import async_client
from bench.cluster.client import send_turn
from bench.plan import SessionPlan

RETRY_AFTER_CAP_S = 5.0


@dataclass(frozen=True)
class TurnResult:
    plan: str  # the session plan's id: its turn k has one greedy answer in every run
    turn: int
    start_s: float  # since the load began
    ttft_s: float | None
    status: int  # 0: no response
    answer: tuple[str, int | None, str | None]
    failed: bool  # 5xx without Retry-After, an error event, a cut stream, a transport error
    hung: bool  # past its deadline
    backpressure: int  # 429/503 answers with Retry-After it waited out first
    detail: str = ""


async def _one_turn(
    http: httpx.AsyncClient, sid: str, plan: SessionPlan, k: int, t0: float, deadline_s: float
) -> TurnResult:
    start = time.monotonic()
    first: list[float] = []
    waited = 0
    while True:
        try:
            turn = await asyncio.wait_for(
                send_turn(http, sid, k, plan.turns[k], "faults",
                          on_first_token=lambda _: first.append(time.monotonic())),
                deadline_s - (time.monotonic() - start),
            )  # fmt: skip
        except (TimeoutError, ValueError):
            return TurnResult(plan.id, k, start - t0, None, 0, ("", None, None), True, True, waited)
        retry = turn.status in (429, 503)  # Penelope's always carry Retry-After
        if retry and time.monotonic() - start < deadline_s - RETRY_AFTER_CAP_S:
            waited += 1
            await asyncio.sleep(min(RETRY_AFTER_CAP_S, 1.0))
            continue
        ttft = first[0] - start if first else None
        failed = turn.server_error or turn.status != 200
        detail = turn.error or ""
        return TurnResult(
            plan.id, k, start - t0, ttft, turn.status, turn.answer, failed, False, waited, detail
        )


async def _slot(
    url: str, plans: Sequence[SessionPlan], slot: int, t0: float, end: Callable[[], float],
    deadline_s: float,
) -> list[TurnResult]:  # fmt: skip
    out: list[TurnResult] = []
    async with async_client(url, deadline_s, 4, idle=2) as http:
        round_ = 0
        while time.monotonic() < end():
            for plan in plans:
                sid = f"{plan.id}#{slot}.{round_}"
                for k, turn in enumerate(plan.turns):
                    if time.monotonic() >= end():
                        return out
                    if k:
                        await asyncio.sleep(min(turn.think_s, 1.0))
                    out.append(await _one_turn(http, sid, plan, k, t0, deadline_s))
            round_ += 1
    return out


async def _load(
    url: str, plans: Sequence[SessionPlan], concurrency: int, duration_s: float,
    deadline_s: float, extend: Callable[[], float | None],
) -> list[TurnResult]:  # fmt: skip
    t0 = time.monotonic()

    def end() -> float:
        later = extend()
        return t0 + max(duration_s, later if later is not None else 0.0)

    slots = [plans[i::concurrency] or plans[i % len(plans) :][:1] for i in range(concurrency)]
    runs = await asyncio.gather(
        *(_slot(url, s, i, t0, end, deadline_s) for i, s in enumerate(slots))
    )
    return [t for run in runs for t in run]


def run_load(
    url: str, plans: Sequence[SessionPlan], concurrency: int, duration_s: float,
    deadline_s: float, extend: Callable[[], float | None] = lambda: None,
) -> list[TurnResult]:  # fmt: skip
    """Turns of every slot, until `duration_s` or the later time `extend()` says (seconds
    since the load began; a fault that outlasts its planned window still has its "after"
    load); turns in flight then end within their deadline."""
    return asyncio.run(_load(url, plans, concurrency, duration_s, deadline_s, extend))
