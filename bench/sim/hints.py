"""Hint mode: the harness's `SessionHints` on each request, made from the trace's truth.

A harness runs the agent's tool calls, so it knows roughly how long the next
one takes and when the session is over (`penelope_engine.hints`). In hint mode
(`SimConfig.hints`) the simulator plays that harness: each turn but the last
carries `expected_gap_s` = the real gap before its session's next turn (the
trace's `think_time_s` of that turn, tool or user time, the same gap the event
loop waits) times log-normal noise `exp(sigma * z)`, z ~ N(0, 1) (median 1:
an estimate off by a factor, as a harness's guess of a tool's run time is);
the session's last turn carries `end_session=True` instead. z is drawn per
(seed, session, turn), so every set-up run on a seed sees the same estimates
whatever the order of events. `retain_s` and `parent_session` are not sent.

Only engines with a hint API get hints: Penelope's (`bench.sim.setups.HINT_CACHES`).
SGLang and vLLM (the peers' engines) have no such API, so peer set-ups run
unchanged in hint mode.
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from bench.sessions import Session
from penelope_engine.hints import SessionHints


def next_gap(session: Session, turn: int) -> float:
    """Seconds from the end of `turn` to the arrival of the session's next turn (the
    trace's truth; `math.inf` after its last turn): what the event loop waits, what the
    oracle policy is told and what hint mode estimates."""
    k = turn + 1
    return session.turns[k].think_time_s if k < len(session.turns) else math.inf


class TraceHints:
    """A request's hints from the trace: its gap with noise of `sigma`, seeded, or the end."""

    def __init__(self, sigma: float, seed: int) -> None:
        if not (0.0 <= sigma < math.inf):
            raise ValueError(f"hint noise sigma must be finite and >= 0, got {sigma}")
        self.sigma, self.seed = sigma, seed
        self._noise: dict[str, np.ndarray] = {}

    def noise(self, session: Session) -> np.ndarray:
        """Each turn's multiplicative noise, `exp(sigma * z)`, fixed by seed and session id."""
        factors = self._noise.get(session.id)
        if factors is None:
            key = zlib.crc32(session.id.encode())  # stable across processes (unlike hash)
            z = np.random.default_rng([self.seed, key]).standard_normal(len(session.turns))
            factors = self._noise[session.id] = np.exp(self.sigma * z)
        return factors

    def for_turn(self, session: Session, turn: int) -> SessionHints:
        gap = next_gap(session, turn)
        if math.isinf(gap):
            return SessionHints(end_session=True)
        return SessionHints(expected_gap_s=float(gap * self.noise(session)[turn]))
