"""A small synthetic agent workload the simulator's tests share: sessions whose history
grows each turn, with tool gaps of 1-3 s, behind one 96-token shared prefix."""

from __future__ import annotations

import numpy as np

from bench.sessions import Scale, Session, Trace, Turn
from bench.workload import Workload, WorkloadConfig, sample_workload

PREFIX = 96  # tokens of the prefix every session shares


def growing_session(i: int, turns: int = 6) -> Session:
    """A growing history: each turn adds 3 blocks of 32 tokens; tool gaps 1-3 s."""
    rng = np.random.default_rng(i)
    out = []
    for k in range(turns):
        n_blocks = 4 + 3 * k
        think = 0.0 if k == 0 else float(rng.uniform(1.0, 3.0))
        stop = "end_turn" if k == turns - 1 else "tool_use"
        out.append(Turn(think, 0.0, ((1, n_blocks),), n_blocks * 32 + 5, 6, stop, PREFIX))
    return Session(f"s{i}", tuple(out), 32, f"s{i}")


def growing_workload(n: int = 6, seed: int = 0) -> Workload:
    """`n` growing sessions starting 0.5 s apart on average."""
    trace = Trace("claude_code", tuple(growing_session(i) for i in range(n)), Scale(), 64)
    return sample_workload(trace, WorkloadConfig(n, seed=seed, mean_interarrival_s=0.5))
