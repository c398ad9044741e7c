"""The simulator's decode fast path: a stretch of decode-only steps granted at once.

Valid when every running request decodes and nothing else can change before
those steps end (no arrival, no stop token): `extend_decodes` gives each
request the pages its next tokens need, `commit_decoded` applies the tokens
of all but the last step. The same core as a step at a time
(`penelope_engine.sched.scheduler.Scheduler`), fewer events; used by `bench.sim.replica`.
"""

from __future__ import annotations

import numpy as np

from penelope_engine.sched.scheduler import Scheduler
from penelope_engine.sched.sequence import BatchItem


def extend_decodes(sched: Scheduler, items: list[BatchItem], steps: int) -> int:
    """Grant up to `steps` decode steps for a step of decodes only; returns how many.

    `items` are every running request, all decoding. Each gets the pages its
    next tokens need, without preempting: where none is left it grants fewer,
    and the next `schedule` preempts as usual.
    """
    assert len(items) == len(sched.running) and not any(s.in_prefill for s in sched.running)
    for j in range(1, steps):
        for it in items:
            if not sched.ensure_page(it.seq, len(it.seq.tokens) - 1 + j):
                return j
    return max(steps, 1)


def commit_decoded(sched: Scheduler, items: list[BatchItem], tokens: list[np.ndarray]) -> None:
    """Apply all but the last step of a decode run granted by `extend_decodes`: the
    tokens only, since no request ends inside the run (the run stops at the first
    last token, and the simulator's requests have no stop tokens)."""
    assert not sched.eos and not any(it.seq.req.sampling.stop_token_ids for it in items)
    for it, toks in zip(items, tokens):
        it.seq.tokens.extend(toks.tolist())
