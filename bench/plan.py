"""The sessions the HTTP benches replay: seeded, clipped, and written out as text prompts.

Sessions are drawn (`bench.workload.sample_workload`, no subagents) from the
Claude Code trace's sessions whose first `turns` turns all fit in
`window_tokens`, cut to those turns, outputs capped at `max_tokens` and tool
gaps scaled by `time_scale` and capped at `max_think_s`. Lengths are one
token per 64-token trace block, as `bench replay` does.

Prompts are text, because every router compared reads text (Ray Serve LLM's
and sgl-router's prefix trees) and sgl-router accepts no token ids: a turn's
token ids (`bench.tokens.TokenMap`) index a list of words that the model's
tokenizer encodes as one token each (a leading space and lowercase letters),
so prompt `k` is exactly `len` of its ids tokens, a turn that extends the
previous one in the trace extends it in text, and the shared system-and-tools
prefix is one text every session starts with. The scripted output tokens of a
turn are in the next prompt, not what the model answered (a random-weight
model): a returning session reuses its previous prompt, not its answer.

`bench faults` and `bench cluster` replay these plans (`PlanConfig` is the draw).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.sessions import Scale, Session
from bench.tokens import TokenMap
from bench.traces import CLAUDE_BLOCK, DEFAULT_TRACE, load_claude_code
from bench.workload import Workload, WorkloadConfig, clip_workload, sample_workload

WORD = re.compile("Ġ[a-z]{3,10}")  # byte-level BPE: Ġ is the leading space
WORDS = 4096


@dataclass(frozen=True)
class PlanConfig:
    """The draw: how many sessions, which turns, and how their times are scaled."""

    sessions: int = 8  # agent sessions drawn from the trace (seeded)
    turns: int = 6  # each session's first turns
    seed: int = 0  # seed of the draw and of the start times
    mean_interarrival_s: float = 4.0  # mean gap between session starts (Poisson)
    time_scale: float = 0.25  # tool times x this
    max_think_s: float = 10.0  # cap on each scaled tool time
    window_tokens: int = 4096  # only sessions whose first turns all fit are drawn
    max_tokens: int = 16  # cap on each request's output tokens
    trace: str = str(DEFAULT_TRACE)  # Claude Code trace file

    def __post_init__(self) -> None:
        if self.sessions < 1 or self.turns < 1 or self.max_tokens < 1:
            raise ValueError("sessions, turns and max_tokens must be positive")
        if self.time_scale <= 0 or self.max_think_s < 0 or self.mean_interarrival_s < 0:
            raise ValueError("time_scale must be positive, max_think_s and interarrival >= 0")


@dataclass(frozen=True)
class TurnPlan:
    think_s: float  # after the previous turn's answer (0 for the first)
    prompt: str
    prompt_tokens: int  # what the model's tokenizer makes of `prompt`
    max_tokens: int


@dataclass(frozen=True)
class SessionPlan:
    id: str
    start_s: float  # since the set-up's first session started
    turns: tuple[TurnPlan, ...]


def one_token_words(tokenizer: Any, limit: int = WORDS) -> tuple[str, ...]:
    """Up to `limit` words, each one token of `tokenizer` with its leading space, sorted."""
    vocab = tokenizer.backend.get_vocab()
    candidates = sorted(w[1:] for w in vocab if WORD.fullmatch(w))
    encoded = tokenizer.backend.encode_batch([" " + w for w in candidates])
    words = [w for w, e in zip(candidates, encoded) if e.ids == [vocab["Ġ" + w]]]
    if len(words) < 2:
        raise ValueError("the tokenizer has no single-token words with a leading space")
    return tuple(words[:limit])


def _fits(s: Session, turns: int, window_tokens: int) -> bool:
    return all(t.input_tokens + t.output_tokens <= window_tokens for t in s.turns[:turns])


def draw_workload(cfg: PlanConfig) -> Workload:
    """The seeded sessions and their start times (the same for every set-up)."""
    trace = load_claude_code(cfg.trace, Scale(1 / CLAUDE_BLOCK, cfg.time_scale))
    fitting = tuple(
        s for s in trace.sessions if s.parent_id is None and _fits(s, cfg.turns, cfg.window_tokens)
    )
    if len(fitting) < cfg.sessions:
        raise ValueError(
            f"only {len(fitting)} sessions fit {cfg.turns} turns in {cfg.window_tokens} tokens"
        )
    wcfg = WorkloadConfig(
        cfg.sessions,
        seed=cfg.seed,
        mean_interarrival_s=cfg.mean_interarrival_s,
        include_subagents=False,
    )
    wl = sample_workload(dataclasses.replace(trace, sessions=fitting), wcfg)
    return clip_workload(wl, cfg.turns, cfg.max_tokens, cfg.max_think_s)


def build_plan(wl: Workload, words: Sequence[str]) -> tuple[SessionPlan, ...]:
    """Every session of `wl` as text prompts over `words` (see the module docstring)."""
    tokens = TokenMap(len(words))
    plans = []
    for s, start in zip(wl.sessions, wl.starts):
        turns = []
        for k, t in enumerate(s.turns):
            ids = tokens.input_ids(s, k)
            prompt = "".join(" " + words[int(i)] for i in ids)
            think = 0.0 if k == 0 else t.think_time_s
            turns.append(TurnPlan(round(think, 3), prompt, len(ids), t.output_tokens))
        plans.append(SessionPlan(s.id, round(start, 3), tuple(turns)))
    return tuple(plans)


def plan_sessions(cfg: PlanConfig) -> tuple[SessionPlan, ...]:
    """`build_plan` over `draw_workload`, with the served model's tokenizer."""
    from penelope_engine.model.registry import qwen3_tokenizer

    return build_plan(draw_workload(cfg), one_token_words(qwen3_tokenizer()))


def describe(plans: Sequence[SessionPlan]) -> dict[str, Any]:
    prompts = [t.prompt_tokens for p in plans for t in p.turns]
    return {
        "sessions": len(plans),
        "requests": len(prompts),
        "prompt_tokens_total": sum(prompts),
        "prompt_tokens_max": max(prompts),
        "last_start_s": max(p.start_s for p in plans),
        "tool_time_s_total": round(sum(t.think_s for p in plans for t in p.turns), 2),
    }
