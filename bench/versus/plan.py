"""The requests every server gets: one seed's workload as token-id prompts, gaps and starts.

Sessions are the trace's top-level Claude Code sessions (`bench.workload`,
no subagents), lengths x 1/S and tool gaps x 1/G (`bench.sessions.Scale`),
each cut to its first `max_turns` turns with outputs and gaps capped, and
ended at its first request past the window (`cut_at_window`). A turn's
prompt is `bench.tokens.TokenMap.input_ids`: sessions with equal
`system_tokens` / `tool_tokens` share those ids, and where turn k+1 extends
turn k in the trace its prompt is turn k's prompt, then turn k's stand-in
reply (the trace's output ids, the same for every server, whatever the model
really generated), then the new ids. This is the simulator's workload too
(`bench.sim.turns` repeats the scripted answers the same way).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.replay.runs import working_set_tokens
from bench.sessions import Scale
from bench.tokens import TokenMap
from bench.traces import load_trace
from bench.versus.config import VersusConfig
from bench.workload import Workload, WorkloadConfig, clip_workload, cut_at_window, sample_workload


@dataclass(frozen=True)
class PlannedTurn:
    gap_s: float  # wait after the previous turn's last token (0 for the first)
    prompt: tuple[int, ...]
    max_tokens: int


@dataclass(frozen=True)
class PlannedSession:
    id: str
    start_s: float
    turns: tuple[PlannedTurn, ...]


@dataclass(frozen=True)
class Plan:
    seed: int
    sessions: tuple[PlannedSession, ...]
    workload: Workload  # what the simulator replays (`bench.versus.predict`)
    working_set_tokens: int  # distinct prefixes once + every session's longest turn past them
    dropped_turns: int  # turns past the window

    @property
    def requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


def workload(cfg: VersusConfig, seed: int) -> tuple[Workload, int]:
    trace = load_trace(cfg.trace, Scale(1.0 / cfg.length_divisor, 1.0 / cfg.time_divisor))
    wl = sample_workload(
        trace, WorkloadConfig(cfg.sessions, seed, cfg.mean_interarrival_s, "poisson", False)
    )
    wl = clip_workload(wl, cfg.max_turns, cfg.max_output_tokens, cfg.max_gap_s)
    return cut_at_window(wl, cfg.window_tokens)


def make_plan(cfg: VersusConfig, seed: int) -> Plan:
    wl, dropped = workload(cfg, seed)
    tokens = TokenMap(cfg.vocab_high, cfg.vocab_low)
    sessions = []
    for s, t0 in zip(wl.sessions, wl.starts):
        turns = tuple(
            PlannedTurn(
                0.0 if k == 0 else t.think_time_s,
                tuple(int(x) for x in tokens.input_ids(s, k)),
                t.output_tokens,
            )
            for k, t in enumerate(s.turns)
        )
        sessions.append(PlannedSession(s.id, float(t0), turns))
    return Plan(seed, tuple(sessions), wl, working_set_tokens(wl), dropped)


def describe(plan: Plan) -> dict[str, object]:
    lens = [len(t.prompt) for s in plan.sessions for t in s.turns]
    return {
        "seed": plan.seed,
        "sessions": len(plan.sessions),
        "requests": plan.requests,
        "dropped_turns": plan.dropped_turns,
        "working_set_tokens": plan.working_set_tokens,
        "prompt_tokens_total": sum(lens),
        "prompt_tokens_max": max(lens, default=0),
        "last_start_s": max((s.start_s for s in plan.sessions), default=0.0),
    }
