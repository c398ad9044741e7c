"""A step's token budgets, as the peers' settings map onto them (`bench.sim.setups.TUNINGS`).

`max_batch_tokens` is one budget for every request of a step, decodes included:
SGLang's `--chunked-prefill-size` in a batch mixed with decodes
(`PrefillAdder.rem_chunk_tokens` less the running decodes). `prefill_chunk`
caps one request's tokens in a step: vLLM's `--long-prefill-token-threshold`.
"""

from __future__ import annotations

import numpy as np

from bench.sim.tiers import NullTiers
from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.config import SchedulerConfig
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.sched.scheduler import Scheduler
from penelope_engine.sched.sequence import BatchItem, Sequence
from penelope_engine.tiers.planner import CalibratedCost

PS = 4


def _scheduler(max_batch_tokens: int, prefill_chunk: int) -> Scheduler:
    cache = PrefixCache(PS, 256, 0, "lru", io=NullTiers(), time_fn=lambda: 0.0)
    cfg = SchedulerConfig(max_batch_tokens, max_running=8, prefill_chunk=prefill_chunk)
    return Scheduler(
        cfg, cache, PageHasher(PS, "t"), NullTiers(), CalibratedCost, (), 1 << 20, clock=lambda: 0.0
    )


def _add(sched: Scheduler, rid: str, prompt_len: int, out: int = 4) -> Sequence:
    prompt = [hash((rid, i)) % 1000 for i in range(prompt_len)]
    req = GenerateRequest(rid, tuple(prompt), SamplingParams(max_tokens=out, ignore_eos=True))
    seq = Sequence(req, sched.hasher.hashes(np.asarray(prompt, np.int32)), prompt, arrival=0.0)
    sched.add(seq)
    return seq


def _step(sched: Scheduler) -> list[BatchItem]:
    items = sched.schedule()
    sched.commit(items, [7 if it.wants_token else None for it in items])
    return items


def test_two_prefills_share_the_step_budget_as_sglang_chunked_prefill_size() -> None:
    sched = _scheduler(max_batch_tokens=64, prefill_chunk=64)
    _add(sched, "a", 40)
    _add(sched, "b", 100)
    items = _step(sched)
    assert [len(it.positions) for it in items] == [40, 24]  # b gets what a leaves
    assert sum(len(it.positions) for it in items) == 64


def test_decode_tokens_are_taken_from_the_step_budget() -> None:
    sched = _scheduler(max_batch_tokens=64, prefill_chunk=64)
    for rid in ("d1", "d2", "d3"):
        _add(sched, rid, 8)
    _step(sched)  # their prefills: decoding from the next step
    _add(sched, "p", 200)
    items = _step(sched)
    decodes = [it for it in items if len(it.positions) == 1]
    assert len(decodes) == 3
    assert [len(it.positions) for it in items if len(it.positions) > 1] == [64 - 3]


def test_a_per_request_cap_leaves_the_rest_of_the_budget_to_others() -> None:
    sched = _scheduler(max_batch_tokens=64, prefill_chunk=16)  # vLLM's long-prefill threshold
    _add(sched, "a", 100)
    _add(sched, "b", 100)
    _add(sched, "c", 10)
    items = _step(sched)
    assert [len(it.positions) for it in items] == [16, 16, 10]
