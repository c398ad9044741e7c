"""Hint mode: the hints a harness can send, when it can know them, from the trace's truth.

A harness runs the agent's tool calls, so once a reply has arrived and ended in
a tool call it knows roughly how long that call takes; it does not know what
the model will answer before the reply, nor how long a person thinks after a
reply without a tool call (`end_turn`: 55 % of the trace's gap time). So in
hint mode (`SimConfig.hints`) the simulator plays a harness that sends hints
through the session endpoint (`POST /v1/penelope/sessions/{id}`,
`Scheduler.session_hints`) at the moment a turn ends, never on the request:

* after a `tool_use` turn that is not the session's last: `expected_gap_s` =
  the real gap before the next turn (the trace's `think_time_s`, the same gap
  the event loop waits) times log-normal noise `exp(sigma * z)`, z ~ N(0, 1)
  (median 1: an estimate off by a factor, as a harness's guess of a tool's
  run time is; `--hint-noise`, 0.25 by default);
* after an `end_turn` turn: nothing;
* after the session's last reply: `end_session` (the harness learns the
  session is over only then).

z is drawn per (seed, session, turn), so every set-up run on a seed sees the
same estimates whatever the order of events. `retain_s` and `parent_session`
are not sent.

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

    def after_turn(self, session: Session, turn: int) -> SessionHints | None:
        """What the harness sends once `turn`'s reply has arrived (None: nothing): the
        gap when the turn called a tool, the end after the session's last reply."""
        gap = next_gap(session, turn)
        if math.isinf(gap):
            return SessionHints(end_session=True)
        if session.turns[turn].stop_reason != "tool_use":
            return None  # a person answers next: no harness knows when
        return SessionHints(expected_gap_s=float(gap * self.noise(session)[turn]))
