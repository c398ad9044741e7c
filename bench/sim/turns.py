"""A session's turns as the engine gets them: `SimRequest`, and how the event loop makes one.

`SessionState` is what the loop keeps of a session between its turns;
`make_request` turns its k-th turn into a `SimRequest`: the trace's token ids
(each earlier answer repeated as it was run, `bench.tokens.repeat_answer`),
the prompt's page ids, the leading pages it shares with the session's
previous sequence (the most any cache could reuse) and the shared prefix's
pages. The engine gets the stop reason the served path has (`served_stop`);
hint mode's hints come after the turn, not with it (`bench.sim.hints`).
`SimRequest.sequence` is the engine's `Sequence` for it, `SimRequest.record`
what the run reports of it once it finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench.sessions import Session
from bench.sim.metrics import RequestRecord, history_class
from bench.tokens import TokenMap, repeat_answer
from penelope_engine.cache.pages import PageHasher
from penelope_engine.hints import NO_HINTS, SessionHints
from penelope_engine.protocol import GenerateRequest, SamplingParams, TokenUsage
from penelope_engine.sched.sequence import Sequence


def served_stop(stop_reason: str) -> str:
    """The stop reason the served path records for a reply: `tool_use` when it ended in
    tool calls, else `end_turn` (whatever else the trace says, or nothing)."""
    return "tool_use" if stop_reason == "tool_use" else "end_turn"


@dataclass(eq=False)
class SimRequest:
    session_id: str
    turn: int
    arrival: float
    prompt_len: int
    output_len: int
    tokens: np.ndarray  # the turn's prompt, then its scripted output
    hashes: np.ndarray  # page ids of the prompt's full pages (tenant "default")
    reusable_pages: int  # leading pages equal to the session's previous sequence
    shared_pages: int  # leading pages of the common prefix
    stop_reason: str  # the trace's; the engine gets `served_stop` of it
    hints: SessionHints = NO_HINTS  # what the request carries (hint mode sends none on it)
    seq: Sequence | None = None
    finished_at: float | None = None
    replica: int = -1

    @property
    def request_id(self) -> str:
        return f"{self.session_id}:{self.turn}"

    @property
    def admitted_at(self) -> float | None:
        return self.seq.admitted_at if self.seq is not None else None

    @property
    def first_token_at(self) -> float | None:
        return self.seq.first_token_at if self.seq is not None else None

    @property
    def usage(self) -> TokenUsage:
        return self.seq.usage if self.seq is not None else TokenUsage()

    def sequence(self, now: float) -> Sequence:
        """The engine's request and sequence for this turn, arriving at `now`: its output is
        the trace's (`max_tokens`, no EOS), and a turn past the first continues a chat."""
        prompt = self.tokens[: self.prompt_len]
        ids = prompt.tolist()
        greq = GenerateRequest(
            self.request_id,
            tuple(ids),
            SamplingParams(max_tokens=self.output_len, ignore_eos=True),
            session_id=self.session_id,
            stop_reason_hint=served_stop(self.stop_reason),
            hints=self.hints,
            has_history=self.turn > 0,  # the miss ledger's moved_replica, not new
        )
        return Sequence(greq, self.hashes, ids, arrival=now, prompt_array=prompt.astype(np.int32))

    def record(self, page_size: int, ttft_floor_s: float | None) -> RequestRecord:
        """What the run reports of this finished turn (`bench.sim.metrics`)."""
        u, seq = self.usage, self.seq
        assert seq is not None and self.finished_at is not None
        assert seq.admitted_at is not None and seq.first_token_at is not None
        return RequestRecord(
            self.session_id,
            self.turn,
            self.replica,
            self.arrival,
            seq.admitted_at,
            seq.first_token_at,
            self.finished_at,
            self.prompt_len,
            u.device_tokens,
            u.host_tokens,
            u.store_tokens,
            u.recomputed_tokens,
            u.new_tokens,
            history_class(u, self.turn, self.shared_pages * page_size, page_size),
            seq.preemptions,
            ttft_floor_s,
            u.misses,
            tuple(g.hint for g in seq.hint_grants if g.clipped_by is None),
        )


@dataclass(eq=False)
class SessionState:
    session: Session
    start: float | None = None
    prev_hashes: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    raw: np.ndarray | None = None  # the current turn's trace tokens (prompt and output)
    last: tuple[np.ndarray, np.ndarray] | None = None  # the last turn: trace tokens, as run


def common_pages(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def make_request(
    st: SessionState,
    k: int,
    now: float,
    tokens: TokenMap,
    hasher: PageHasher,
    page_size: int,
    hints: SessionHints = NO_HINTS,
) -> SimRequest:
    """Turn `k` of `st`'s session arriving at `now`; updates `st` (its tokens, its pages)."""
    s, turn = st.session, st.session.turns[k]
    raw = tokens.sequence_ids(s, k)
    n = turn.input_tokens
    prompt = repeat_answer(raw[:n], st.last)  # a view of raw unless an answer differs
    seq = raw if np.shares_memory(prompt, raw) else np.concatenate([prompt, raw[n:]])
    st.raw = raw
    hashes = hasher.hashes(seq)
    ps = page_size
    reusable = common_pages(st.prev_hashes, hashes[: n // ps])
    st.prev_hashes = hashes[: (len(seq) - 1) // ps]
    return SimRequest(
        s.id,
        k,
        now,
        n,
        turn.output_tokens,
        seq,
        hashes[: n // ps],
        reusable,
        turn.shared_prefix_tokens // ps,
        turn.stop_reason,
        hints,
    )
