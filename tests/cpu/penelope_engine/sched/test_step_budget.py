"""A step's token budgets, as the peers' settings map onto them (`bench.sim.setups.TUNINGS`).

`max_batch_tokens` is one budget for every request of a step, decodes included:
SGLang's `--chunked-prefill-size` in a batch mixed with decodes
(`PrefillAdder.rem_chunk_tokens` less the running decodes). `prefill_chunk`
caps one request's tokens in a step: vLLM's `--long-prefill-token-threshold`.
`solo_prefill_chunk` lifts that cap for a prefill with nothing beside it.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.sim.tiers import NullTiers
from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.config import SchedulerConfig
from penelope_engine.errors import ConfigError
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.sched.scheduler import Scheduler
from penelope_engine.sched.sequence import BatchItem, Sequence
from penelope_engine.tiers.planner import CalibratedCost

PS = 4


def _scheduler(
    max_batch_tokens: int,
    prefill_chunk: int,
    solo: int = 0,
    max_running: int = 8,
    max_prefills: int = 0,
) -> Scheduler:
    book = Sessions(lambda: 0.0)
    cache = PrefixCache(PS, 256, 0, "lru", io=NullTiers(), sessions=book)
    cfg = SchedulerConfig(
        max_batch_tokens,
        max_running,
        prefill_chunk=prefill_chunk,
        solo_prefill_chunk=solo,
        max_prefills=max_prefills,
    )
    return Scheduler(
        cfg,
        cache,
        book,
        PageHasher(PS, "t"),
        NullTiers(),
        CalibratedCost,
        (),
        1 << 20,
        clock=lambda: 0.0,
    )


def _add(sched: Scheduler, rid: str, prompt_len: int, out: int = 4) -> Sequence:
    prompt = [hash((rid, i)) % 1000 for i in range(prompt_len)]
    req = GenerateRequest(rid, tuple(prompt), SamplingParams(max_tokens=out, ignore_eos=True))
    seq = Sequence(req, sched._hasher.hashes(np.asarray(prompt, np.int32)), prompt, arrival=0.0)
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


def test_a_prefill_alone_takes_the_solo_chunk_and_shares_the_step_once_others_come() -> None:
    sched = _scheduler(max_batch_tokens=64, prefill_chunk=16, solo=48)
    a = _add(sched, "a", 200)
    assert [len(it.positions) for it in _step(sched)] == [48]  # alone: the solo chunk
    assert [len(it.positions) for it in _step(sched)] == [48]  # still alone
    b = _add(sched, "b", 100)
    items = _step(sched)
    assert [(it.seq, len(it.positions)) for it in items] == [(a, 16), (b, 16)]
    while a.in_prefill or b.in_prefill:
        items = _step(sched)
        assert all(len(it.positions) <= 16 for it in items)  # never alone again
    _add(sched, "c", 100)  # a and b decode beside c's prefill: the usual cap
    assert [len(it.positions) for it in _step(sched)] == [1, 1, 16]


def test_a_queued_request_that_cannot_run_yet_keeps_the_cap() -> None:
    sched = _scheduler(max_batch_tokens=64, prefill_chunk=16, solo=64, max_running=1)
    _add(sched, "a", 100)
    _add(sched, "b", 100)  # waits: max_running is 1
    assert [len(it.positions) for it in _step(sched)] == [16]


def test_without_a_solo_chunk_a_lone_prefill_keeps_the_cap() -> None:
    sched = _scheduler(max_batch_tokens=64, prefill_chunk=16)
    _add(sched, "a", 100)
    assert [len(it.positions) for it in _step(sched)] == [16]


@pytest.mark.parametrize("solo", [8, 65, -1])
def test_the_solo_chunk_lies_between_the_chunk_and_the_step(solo: int) -> None:
    with pytest.raises(ConfigError, match="solo_prefill_chunk"):
        SchedulerConfig(64, prefill_chunk=16, solo_prefill_chunk=solo)


def test_max_prefills_admits_the_next_prefill_as_one_finishes_and_never_holds_decodes() -> None:
    """One prefill at a time: b and c wait in the queue (holding no pages) while a
    prefills, a decodes beside b's prefill, and the queue empties in arrival order."""
    sched = _scheduler(max_batch_tokens=256, prefill_chunk=64, max_prefills=1)
    a, b, c = _add(sched, "a", 100), _add(sched, "b", 40), _add(sched, "c", 40)
    first = _step(sched)
    assert [it.seq for it in first] == [a] and len(first[0].positions) == 64
    assert list(sched.waiting) == [b, c] and b.owned_pages == c.owned_pages == 0
    second = _step(sched)  # a's last chunk; still no room for another prefill
    assert [it.seq for it in second] == [a] and len(second[0].positions) == 36
    third = _step(sched)  # a decodes; b is admitted beside it, c still waits
    assert [(it.seq, len(it.positions)) for it in third] == [(a, 1), (b, 40)]
    assert list(sched.waiting) == [c]
    fourth = _step(sched)
    assert [(it.seq, len(it.positions)) for it in fourth] == [(a, 1), (b, 1), (c, 40)]
    sched._cache.check_integrity(request_pages=sched.request_pages())


def test_max_prefills_off_admits_what_the_budget_allows() -> None:
    sched = _scheduler(max_batch_tokens=256, prefill_chunk=64)
    for rid in ("a", "b", "c"):
        _add(sched, rid, 40)
    assert [len(it.positions) for it in _step(sched)] == [40, 40, 40]


def test_max_prefills_is_checked() -> None:
    with pytest.raises(ConfigError, match="max_prefills"):
        SchedulerConfig(max_prefills=-1)
