"""Loads set by the machine's own speed: `bench versus --load X` (issue 58).

The service rate is the fastest server's prefill tokens/s on prompts as long as
the trace's typical turn, each started cold and timed on its own before the runs
(`measure_service_rate`). A plan's offered prefill work is what a server must
prefill when it keeps each session's own previous prompt: a first turn's whole
prompt, a later turn's tokens past its common prefix with the previous one
(`offered_tokens`). The work arrives over the plan's span, the time it would take
if every reply were instant: a session's start plus its tool gaps
(`span_s`). `--load X` stretches or squeezes session starts and tool gaps by one
factor (`time_factor`), so that offered work / span = X x service rate:

    X = 0.5   idle sessions hold the memory, the server keeps up
    X = 0.9   near saturation
    X = 1.2   overloaded: the queue, not the cache, decides much of TTFT

Replies take time, so a session's turns arrive later than the span says and the
load a server sees is at most X; the bench reports X as offered.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from bench.versus.plan import Plan, PlannedSession

MIN_RATE_PROMPT = 64  # the shortest prompt the service rate is timed on


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def turn_work(session: PlannedSession) -> list[int]:
    """Tokens each turn of `session` must prefill when its previous prompt is cached."""
    work: list[int] = []
    previous: tuple[int, ...] = ()
    for turn in session.turns:
        work.append(len(turn.prompt) - _common_prefix(turn.prompt, previous))
        previous = turn.prompt
    return work


def offered_tokens(plan: Plan) -> int:
    return sum(sum(turn_work(s)) for s in plan.sessions)


def span_s(plan: Plan) -> float:
    """When the last turn would arrive if every reply were instant."""
    return max((s.start_s + sum(t.gap_s for t in s.turns) for s in plan.sessions), default=0.0)


def rate_prompt_tokens(plans: list[Plan]) -> int:
    """The prompt length the service rate is timed on: the median turn's work."""
    work = [w for p in plans for s in p.sessions for w in turn_work(s)]
    return max(MIN_RATE_PROMPT, int(statistics.median(work))) if work else MIN_RATE_PROMPT


def time_factor(plan: Plan, load: float, service_tok_s: float) -> float:
    """The factor on starts and gaps that makes `plan` offer `load` x `service_tok_s`."""
    if load <= 0 or service_tok_s <= 0:
        raise ValueError(f"load and service rate must be positive, got {load}, {service_tok_s}")
    span = span_s(plan)
    if span <= 0:
        raise ValueError("the plan has no span: one session with no gaps cannot be loaded")
    return offered_tokens(plan) / (load * service_tok_s * span)


def scaled(plan: Plan, factor: float) -> Plan:
    """`plan` with every session start and tool gap times `factor`."""
    sessions = tuple(
        replace(
            s,
            start_s=s.start_s * factor,
            turns=tuple(replace(t, gap_s=t.gap_s * factor) for t in s.turns),
        )
        for s in plan.sessions
    )
    return replace(plan, sessions=sessions)
