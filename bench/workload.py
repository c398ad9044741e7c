"""A seeded workload: which sessions run and when each one starts.

Sessions are drawn from a trace without replacement; asking for more than the
trace has adds copies whose block ids live in their own namespace (`#2`, `#3`,
...), so a copy shares only its cross-session prefix (`Session.prefix_blocks`:
system prompt and tool schemas) with its original. Subagents
come with their parent. Starts are staggered by a Poisson process
(`mean_interarrival_s`), or taken from the trace (`arrivals="trace"`,
Mooncake's real timestamps, shifted so that the first sampled session starts
at 0). `clip_workload` cuts every session to its first turns and caps the
output lengths, for replays on a small engine.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.sessions import Session, Trace

ARRIVALS = ("poisson", "trace")


@dataclass(frozen=True)
class WorkloadConfig:
    sessions: int
    seed: int = 0
    mean_interarrival_s: float = 5.0  # Poisson session starts (already in scaled time)
    arrivals: str = "poisson"
    include_subagents: bool = True

    def __post_init__(self) -> None:
        if self.sessions < 1:
            raise ValueError(f"sessions must be >= 1, got {self.sessions}")
        if self.mean_interarrival_s < 0:
            raise ValueError("mean_interarrival_s must be >= 0")
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"arrivals must be one of {ARRIVALS}, got {self.arrivals!r}")


@dataclass(frozen=True)
class Workload:
    sessions: tuple[Session, ...]  # top-level sessions, in start order
    starts: tuple[float, ...]  # start time of each top-level session
    children: dict[str, tuple[Session, ...]]  # subagents by parent session id
    config: WorkloadConfig
    trace: dict[str, Any]  # Trace.describe(), with the scale factors

    @property
    def all_sessions(self) -> tuple[Session, ...]:
        return self.sessions + tuple(c for kids in self.children.values() for c in kids)


def _copy_id(name: str, c: int) -> str:
    return name if c == 0 else f"{name}#{c + 1}"


def _copy(s: Session, c: int) -> Session:
    if c == 0:
        return s
    parent = _copy_id(s.parent_id, c) if s.parent_id else None
    return dataclasses.replace(
        s, id=_copy_id(s.id, c), block_scope=_copy_id(s.block_scope, c), parent_id=parent
    )


def _starts(chosen: list[Session], cfg: WorkloadConfig, rng: np.random.Generator) -> list[float]:
    if cfg.arrivals == "trace":
        t0 = min(s.trace_start_s for s in chosen)
        return [s.trace_start_s - t0 for s in chosen]
    gaps = (
        rng.exponential(cfg.mean_interarrival_s, size=len(chosen))
        if cfg.mean_interarrival_s > 0
        else np.zeros(len(chosen))
    )
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def sample_workload(trace: Trace, cfg: WorkloadConfig) -> Workload:
    """Draw `cfg.sessions` top-level sessions with `cfg.seed` and give them start times."""
    tops = [s for s in trace.sessions if s.parent_id is None]
    kids: dict[str, list[Session]] = {}
    for s in trace.sessions:
        if s.parent_id is not None:
            kids.setdefault(s.parent_id, []).append(s)
    rng = np.random.default_rng(cfg.seed)
    if cfg.sessions <= len(tops):
        picks = [int(i) for i in rng.permutation(len(tops))[: cfg.sessions]]
    else:
        picks = [int(i) for i in rng.permutation(cfg.sessions) % len(tops)]
    seen: dict[int, int] = {}
    chosen: list[Session] = []
    children: dict[str, tuple[Session, ...]] = {}
    for i in picks:
        c = seen[i] = seen.get(i, -1) + 1
        chosen.append(_copy(tops[i], c))
        stack = [tops[i].id] if cfg.include_subagents else []
        while stack:  # every descendant, keyed by its direct parent
            parent = stack.pop()
            if parent in kids:
                children[_copy_id(parent, c)] = tuple(_copy(k, c) for k in kids[parent])
                stack += [k.id for k in kids[parent]]
    starts = _starts(chosen, cfg, rng)
    order = sorted(range(len(chosen)), key=lambda j: (starts[j], j))
    return Workload(
        tuple(chosen[j] for j in order),
        tuple(starts[j] for j in order),
        children,
        cfg,
        trace.describe(),
    )


def _clip(s: Session, max_turns: int, max_output_tokens: int, max_think_s: float) -> Session:
    turns = tuple(
        dataclasses.replace(
            t,
            output_tokens=min(t.output_tokens, max_output_tokens),
            think_time_s=min(t.think_time_s, max_think_s),
        )
        for t in s.turns[:max_turns]
    )
    return dataclasses.replace(s, turns=turns)


def clip_workload(
    wl: Workload, max_turns: int, max_output_tokens: int, max_think_s: float = math.inf
) -> Workload:
    """The same sessions and starts, each cut to its first `max_turns` turns, outputs capped
    at `max_output_tokens` and gaps between turns at `max_think_s`.

    A subagent is kept only when the turn it follows is kept (and so are its
    own subagents); the parent's tool time shrinks with its turns.
    """
    if max_turns < 1 or max_output_tokens < 1:
        raise ValueError(
            f"need max_turns >= 1 and max_output_tokens >= 1, got {max_turns}, {max_output_tokens}"
        )
    kept = {s.id for s in wl.sessions}
    children: dict[str, tuple[Session, ...]] = {}
    stack = list(kept)
    while stack:
        parent = stack.pop()
        kids = tuple(
            _clip(k, max_turns, max_output_tokens, max_think_s)
            for k in wl.children.get(parent, ())
            if k.after_turn < max_turns
        )
        if kids:
            children[parent] = kids
            stack += [k.id for k in kids]
    return dataclasses.replace(
        wl,
        sessions=tuple(_clip(s, max_turns, max_output_tokens, max_think_s) for s in wl.sessions),
        children=children,
    )


def cut_at_window(wl: Workload, window_tokens: int) -> tuple[Workload, int]:
    """Every session ends before its first request longer than `window_tokens` (prompt plus
    output); returns the cut workload and how many turns it dropped.

    Sessions left without a turn are dropped with their starts, and a subagent
    is kept only when the turn it follows is kept (and so are its own).
    """
    if window_tokens < 1:
        raise ValueError(f"window_tokens must be >= 1, got {window_tokens}")
    dropped = 0

    def cut(s: Session, keep: bool) -> Session | None:
        """`s` cut at the window, or None (its turns and its subagents' counted as dropped)."""
        nonlocal dropped
        n = (
            next(
                (
                    i
                    for i, t in enumerate(s.turns)
                    if t.input_tokens + t.output_tokens > window_tokens
                ),
                len(s.turns),
            )
            if keep
            else 0
        )
        dropped += len(s.turns) - n
        if n == 0:
            for k in wl.children.get(s.id, ()):
                cut(k, False)
            return None
        return dataclasses.replace(s, turns=s.turns[:n])

    tops = [(c, t0) for s, t0 in zip(wl.sessions, wl.starts) if (c := cut(s, True)) is not None]
    children: dict[str, tuple[Session, ...]] = {}
    stack = [c for c, _ in tops]
    while stack:
        parent = stack.pop()
        kids = []
        for k in wl.children.get(parent.id, ()):
            c = cut(k, k.after_turn < len(parent.turns))
            if c is not None:
                kids.append(c)
                stack.append(c)
        if kids:
            children[parent.id] = tuple(kids)
    cut_wl = dataclasses.replace(
        wl,
        sessions=tuple(c for c, _ in tops),
        starts=tuple(t0 for _, t0 in tops),
        children=children,
    )
    return cut_wl, dropped
