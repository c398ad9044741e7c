"""What one run measures, and its summary.

Per request: TTFT (arrival to first token, queueing included), the queueing
part alone (arrival to admission, when its KV pages are allocated), and where its
prompt tokens came from. Per session: JCT (first arrival to the last turn's
last token) and LLM time (JCT minus the tool and user time between turns).

    hit_ratio              cached prompt tokens (device + host + store) / prompt tokens
    recompute_ratio        prompt tokens recomputed because the cache had lost them
                           (history of the session, not new tokens) / prompt tokens
    partial_return_ratio   returning requests that found part, not all, of their
                           private history / returning requests with private history
    miss_tokens            the computed prompt tokens (recomputed + new) by why they
                           were not cache hits: the engine's miss ledger
                           (`TokenUsage.misses`, `penelope_engine.sched.ledger`) summed
                           over the run, per cause; `miss_ratios` divides them by the
                           prompt tokens (`miss_<cause>_ratio`)
    hint_grants            requests whose hint (`SessionHints`, hint mode) the engine
                           granted in full, per hint
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from penelope_engine.protocol import MISS_CAUSES, MissTokens, TokenUsage


@dataclass(frozen=True)
class RequestRecord:
    session_id: str
    turn: int
    replica: int
    arrival: float
    admitted_at: float  # left the queue: its KV pages were allocated
    first_token_at: float
    finished_at: float
    prompt_tokens: int
    device_tokens: int
    host_tokens: int
    store_tokens: int
    recomputed_tokens: int
    new_tokens: int
    history_class: str  # first | full | partial | miss
    preemptions: int = 0  # times the scheduler put it back in the queue
    # The least TTFT any cache and scheduler could give it (`costmodel.ttft_floor`:
    # the tokens its session never sent before, prefilled alone; None: unknown).
    ttft_floor_s: float | None = None
    # The miss ledger: recomputed + new tokens by cause (they sum to them exactly).
    misses: MissTokens = MissTokens()
    hints_granted: tuple[str, ...] = ()  # its hints the engine granted in full

    @property
    def ttft(self) -> float:
        return self.first_token_at - self.arrival

    @property
    def queue_s(self) -> float:
        return self.admitted_at - self.arrival


@dataclass(frozen=True)
class SessionRecord:
    session_id: str
    start: float
    end: float
    tool_time_s: float
    # The least LLM time any cache could give this session: prefill of the tokens it
    # never sent before and decode alone on the replica (simulator only; None: unknown).
    llm_floor_s: float | None = None

    @property
    def jct(self) -> float:
        return self.end - self.start

    @property
    def llm_time(self) -> float:
        return self.jct - self.tool_time_s


@dataclass(frozen=True)
class RunMetrics:
    mean_ttft_s: float
    p90_ttft_s: float
    mean_jct_s: float
    mean_llm_time_s: float
    mean_queue_s: float  # arrival to admission: waiting for a batch slot or for KV memory
    hit_ratio: float
    partial_return_ratio: float
    recompute_ratio: float
    requests: int
    sessions: int
    failed_requests: int
    prompt_tokens: int
    recomputed_tokens: int
    sim_time_s: float
    wall_time_s: float
    ttfts: tuple[float, ...] = field(repr=False, default=())
    mean_llm_floor_s: float | None = None  # see SessionRecord.llm_floor_s
    mean_ttft_floor_s: float | None = None  # see RequestRecord.ttft_floor_s
    host_ratio: float = 0.0  # prompt tokens loaded from the host tier / prompt tokens
    store_ratio: float = 0.0  # prompt tokens loaded from the store / prompt tokens
    miss_tokens: dict[str, int] = field(default_factory=dict)  # cause -> computed tokens
    hint_grants: dict[str, int] = field(default_factory=dict)  # hint -> requests granted it

    def miss_ratios(self) -> dict[str, float]:
        """`miss_<cause>_ratio`: computed prompt tokens of each cause / prompt tokens."""
        prompt = max(self.prompt_tokens, 1)
        return {f"miss_{c}_ratio": self.miss_tokens.get(c, 0) / prompt for c in MISS_CAUSES}

    def as_dict(self, with_ttfts: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not with_ttfts:
            d.pop("ttfts")
        return d


def summarize(
    requests: list[RequestRecord],
    sessions: list[SessionRecord],
    failed: int,
    sim_time_s: float,
    wall_time_s: float,
) -> RunMetrics:
    if not requests:
        raise ValueError("no request finished: nothing to summarize")
    ttft = np.array([r.ttft for r in requests])
    prompt = sum(r.prompt_tokens for r in requests)
    cached = sum(r.device_tokens + r.host_tokens + r.store_tokens for r in requests)
    recomputed = sum(r.recomputed_tokens for r in requests)
    returning = [r for r in requests if r.history_class != "first"]
    partial = sum(r.history_class == "partial" for r in returning)
    floors = [s.llm_floor_s for s in sessions if s.llm_floor_s is not None]
    known = bool(sessions) and len(floors) == len(sessions)
    ttft_floors = [r.ttft_floor_s for r in requests if r.ttft_floor_s is not None]
    misses = sum((r.misses for r in requests), MissTokens())
    grants: dict[str, int] = {}
    for r in requests:
        for h in r.hints_granted:
            grants[h] = grants.get(h, 0) + 1
    return RunMetrics(
        mean_ttft_s=float(ttft.mean()),
        p90_ttft_s=float(np.percentile(ttft, 90)),
        mean_jct_s=float(np.mean([s.jct for s in sessions])) if sessions else float("nan"),
        mean_llm_time_s=float(np.mean([s.llm_time for s in sessions]))
        if sessions
        else float("nan"),
        mean_queue_s=float(np.mean([r.queue_s for r in requests])),
        hit_ratio=cached / prompt,
        partial_return_ratio=partial / len(returning) if returning else 0.0,
        recompute_ratio=recomputed / prompt,
        requests=len(requests),
        sessions=len(sessions),
        failed_requests=failed,
        prompt_tokens=prompt,
        recomputed_tokens=recomputed,
        sim_time_s=float(sim_time_s),
        wall_time_s=wall_time_s,
        ttfts=tuple(float(t) for t in ttft),
        mean_llm_floor_s=float(np.mean(floors)) if known else None,
        mean_ttft_floor_s=float(np.mean(ttft_floors))
        if len(ttft_floors) == len(requests)
        else None,
        host_ratio=sum(r.host_tokens for r in requests) / prompt,
        store_ratio=sum(r.store_tokens for r in requests) / prompt,
        miss_tokens=misses.as_dict(),
        hint_grants=dict(sorted(grants.items())),
    )


def history_class(usage: TokenUsage, turn: int, shared_tokens: int, page_size: int) -> str:
    """first | full | partial | miss: how much of its private history a request found.

    Private history = what the session had cached before (found or lost) past
    the shared prefix; `recomputed_tokens` is the part the cache had lost.
    """
    if turn == 0:
        return "first"
    private = usage.cached_tokens + usage.recomputed_tokens - shared_tokens // page_size * page_size
    if private <= 0:
        return "first"
    lost = usage.recomputed_tokens
    return "full" if lost == 0 else ("miss" if lost >= private else "partial")
