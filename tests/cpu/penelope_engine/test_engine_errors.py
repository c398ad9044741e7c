"""Bad input gets a clear error and leaves the engine and its cache untouched; aborts free pages."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from penelope_engine.cache.eviction import EVICTION_POLICIES
from penelope_engine.cache.tier import Tier
from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.errors import InvalidRequestError, UnknownNameError
from penelope_engine.model.registry import load_model, model_names
from penelope_engine.protocol import GenerateRequest, SamplingParams

PROMPT = tuple(range(1000, 1022))  # 22 tokens: 5 full pages of 4, then 2 tokens


def request(
    rid: str, prompt: tuple[int, ...] = PROMPT, max_tokens: int = 2, **kw
) -> GenerateRequest:
    return GenerateRequest(
        rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True), **kw
    )


def state(engine: Engine) -> tuple:
    """Everything a rejected request must not change."""
    cache = engine.inspect().core.cache
    nodes = sorted(
        (n.start, n.hashes.tobytes(), n.device.tobytes(), n.host.tobytes(), n.lock)
        for n in cache._tree.iter_nodes()
    )
    sched = engine.inspect().core.scheduler
    return (
        nodes,
        cache._device.num_used,
        cache._host.num_used,
        sorted(engine.inspect().core.sessions.ids()),
        len(sched.waiting),
        len(sched.running),
        engine.stats(),
    )


@pytest.fixture
def warm(make_engine: Callable[..., Engine]) -> Engine:
    """An engine with one finished session in its cache."""
    engine = make_engine(device_pages=16)
    engine.generate_sync(request("warm", session_id="a"))
    return engine


@pytest.mark.parametrize(
    ("prompt", "error", "message"),
    [
        ((), InvalidRequestError, "prompt is empty"),
        ((5,) * 32768, InvalidRequestError, "window is 64"),  # the pool's 16 x 4 tokens
        ((5, 151669), InvalidRequestError, r"token ids must be in \[0, 151669\)"),
        ((-1, 5), InvalidRequestError, "token ids must be in"),
        (tuple(range(64)), InvalidRequestError, "prompt has 64 tokens; the model's window is 64"),
    ],
    ids=["empty", "over-window", "over-vocab", "negative", "over-pool"],
)
def test_bad_prompts_are_rejected_and_change_nothing(
    warm: Engine, prompt: tuple[int, ...], error: type, message: str
) -> None:
    before = state(warm)
    with pytest.raises(error, match=message):
        warm.add_request(request("bad", prompt, session_id="b"))
    assert state(warm) == before
    warm.check_integrity()
    assert warm.generate_sync(request("again", session_id="a")).finished  # still serves


def test_a_duplicate_request_id_is_rejected(warm: Engine) -> None:
    warm.add_request(request("dup"))
    before = state(warm)
    with pytest.raises(InvalidRequestError, match="'dup' is already running"):
        warm.add_request(request("dup", tuple(range(7))))
    assert state(warm) == before
    while warm.has_work():
        warm.step()
    warm.check_integrity()


def test_bad_sampling_values_are_rejected() -> None:
    with pytest.raises(InvalidRequestError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(InvalidRequestError, match="temperature"):
        SamplingParams(temperature=-1.0)


def test_unknown_model_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError) as err:
        load_model("gpt-5")
    assert all(name in str(err.value) for name in model_names())
    with pytest.raises(UnknownNameError, match="tiny-qwen3"):
        Engine(EngineConfig(model="gpt-5"))


def test_unknown_policy_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError) as err:
        CacheConfig(policy="fifo")
    assert all(name in str(err.value) for name in EVICTION_POLICIES)


def test_requests_that_outgrow_the_pool_together_preempt_the_newest(
    make_engine: Callable[..., Engine],
) -> None:
    """Two prompts of 4 pages fill a pool of 8; both need a 5th page to decode.

    The newest is preempted (its KV kept in the tree), the older one finishes,
    then the newest resumes and finishes too.
    """
    engine = make_engine(device_pages=8)
    old = engine.add_request(request("old", tuple(range(100, 114)), max_tokens=10))
    new = engine.add_request(request("new", tuple(range(200, 214)), max_tokens=10))
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    assert old.error is None and old.finish_reason == "length" and old.num_generated == 10
    assert new.error is None and new.finish_reason == "length" and new.num_generated == 10
    assert new.preemptions > 0 and old.preemptions == 0


def test_a_single_request_that_would_outgrow_the_pool_stops_at_the_window(
    make_engine: Callable[..., Engine],
) -> None:
    """The window served is the device pool's (4 pages x 4 tokens), so a request that would
    outgrow the pool ends "length" there instead of failing mid-decode."""
    engine = make_engine(device_pages=4)
    assert engine.max_model_len == 16
    seq = engine.add_request(request("big", tuple(range(100, 114)), max_tokens=10))
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    assert seq.error is None and seq.finish_reason == "length" and len(seq.tokens) == 16
    assert engine.inspect().core.cache._device.num_used == engine.inspect().core.cache.evictable()


def test_abort_frees_pages_while_waiting_prefilling_and_decoding(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(device_pages=64, max_batch_tokens=8, prefill_chunk=8, max_running=2)
    seqs = [
        engine.add_request(request(f"r{i}", tuple(range(i * 100, i * 100 + 30)), 50))
        for i in range(3)
    ]
    for _ in range(5):  # r0 decodes, r1 prefills, r2 waits (max_running=2)
        engine.step()
    waiting = engine.inspect().core.scheduler.waiting
    assert not seqs[0].in_prefill and seqs[1].in_prefill and seqs[2] in waiting
    for seq in seqs:
        assert engine.abort(seq.request_id)
        engine.check_integrity()
    assert not engine.has_work() and not engine.abort("r0")
    tree_pages = sum(n.n_device for n in engine.inspect().core.cache._tree.iter_nodes())
    assert engine.inspect().core.cache._device.num_used == tree_pages  # no page held by a request
    assert engine.generate_sync(request("after", tuple(range(0, 30)))).finished


def test_a_waiting_request_does_not_flush_the_cache(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(device_pages=16)
    engine.generate_sync(request("a", tuple(range(500, 520)), session_id="a"))  # 5 pages kept
    cached = engine._hasher.hashes(tuple(range(500, 520)))
    engine.add_request(request("running", tuple(range(600, 624)), max_tokens=30))  # 6 pages
    engine.step()
    engine.add_request(request("big", tuple(range(700, 744))))  # 11 pages: 5 free + 5 cached
    engine.step()
    assert engine.inspect().core.scheduler.waiting, (
        "the big request should wait for the running one"
    )
    where = engine.inspect().core.cache.match(cached).where
    assert [Tier(w) for w in where] == [Tier.DEVICE] * 5


def test_aborting_a_waiting_request_ends_its_session_queue_entry(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(policy="return_aware", max_running=1)
    engine.add_request(request("run", session_id="x", max_tokens=5))
    engine.add_request(request("wait", tuple(range(50, 60)), session_id="w"))
    engine.step()
    assert engine.abort("wait")
    assert engine.inspect().core.sessions.record("w").queued_since is None
