"""Greedy generation over agent turns is exact whatever the cache evicted in between.

Three sessions share a 12-token prefix, have 20 private tokens each, and take
three turns (each turn appends the reply and 6 new tokens). With a pool of 22
pages of 4 tokens the sessions do not fit together, so every policy evicts
between turns: holes and suffixes (penelope and the cost-aware policies), tails
(lru), demotion to a host tier. The tokens must equal a run that evicts nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from penelope_engine.engine import Engine
from penelope_engine.protocol import GenerateRequest, SamplingParams, TokenUsage

SESSIONS, TURNS = 3, 3
SMALL_POOL = 22
SAMPLING = SamplingParams(max_tokens=2, ignore_eos=True)


@dataclass
class Replay:
    tokens: list[tuple[int, ...]] = field(default_factory=list)
    usage: list[TokenUsage] = field(default_factory=list)
    segments: list[list[str]] = field(default_factory=list)  # where each prompt was, before


def replay(engine: Engine) -> Replay:
    rng = np.random.default_rng(0)
    shared = rng.integers(0, 5000, 12).tolist()
    history = {s: shared + rng.integers(0, 5000, 20).tolist() for s in range(SESSIONS)}
    out = Replay()
    for turn in range(TURNS):
        for s in range(SESSIONS):
            prompt = tuple(history[s])
            found = engine.inspect().core.cache.match(engine._hasher.hashes(prompt)).segments(4)
            out.segments.append([seg.where.label for seg in found])
            stop = "end_turn" if s == 1 else "tool_use"
            req = GenerateRequest(f"{s}-{turn}", prompt, SAMPLING, f"s{s}", stop_reason_hint=stop)
            result = engine.generate_sync(req)
            engine.check_integrity()
            out.tokens.append(result.token_ids)
            out.usage.append(result.usage)
            history[s] = list(prompt) + list(result.token_ids) + rng.integers(0, 5000, 6).tolist()
    return out


@pytest.fixture(scope="module")
def reference(tiny_qwen3) -> Replay:
    from penelope_engine.config import CacheConfig, EngineConfig

    return replay(Engine(EngineConfig(cache=CacheConfig(4, 512, policy="lru")), loaded=tiny_qwen3))


def check_usage(run: Replay) -> None:
    for u in run.usage:
        parts = u.device_tokens + u.host_tokens + u.store_tokens
        assert parts + u.recomputed_tokens + u.new_tokens == u.prompt_tokens, u
        assert u.completion_tokens == SAMPLING.max_tokens


def test_the_reference_run_reuses_the_cache(reference: Replay) -> None:
    check_usage(reference)
    assert all(len(t) == SAMPLING.max_tokens for t in reference.tokens)
    assert len(set(reference.tokens)) > 1  # greedy decoding does not collapse to one token
    assert sum(u.recomputed_tokens for u in reference.usage) == 0
    assert reference.usage[1].device_tokens == 12  # the second session finds the shared prefix


@pytest.mark.parametrize("policy", ["lru", "penelope", "greedydual", "return_aware"])
def test_eviction_between_turns_keeps_greedy_tokens_exact(
    policy: str, reference: Replay, make_engine: Callable[..., Engine]
) -> None:
    engine = make_engine(policy, device_pages=SMALL_POOL)
    run = replay(engine)
    assert run.tokens == reference.tokens
    check_usage(run)
    assert sum(u.recomputed_tokens for u in run.usage) > 0, "nothing was evicted: no test"
    holes = [w for w in run.segments if "hole" in w and w[-1] == "device"]
    if policy == "lru":
        assert all(w in ([], ["device"]) for w in run.segments), run.segments
    else:
        assert holes, f"{policy} never left a cached suffix behind a hole"


@pytest.mark.parametrize("write_policy", ["write_through", "write_back"])
def test_a_host_tier_serves_evicted_pages_exactly(
    write_policy: str, reference: Replay, tiny_qwen3
) -> None:
    from penelope_engine.config import CacheConfig, EngineConfig

    cache = CacheConfig(4, SMALL_POOL, 40, "penelope", write_policy=write_policy)
    engine = Engine(EngineConfig(cache=cache), loaded=tiny_qwen3)
    run = replay(engine)
    assert run.tokens == reference.tokens
    check_usage(run)
    assert sum(u.host_tokens for u in run.usage) > 0, "no page came back from the host"
    stats = engine.stats()
    assert stats.tokens.host_tokens == sum(u.host_tokens for u in run.usage)
    assert dict(((p, r), n) for p, r, n in stats.evictions)[("penelope", "demote")] > 0


@pytest.mark.parametrize("host_pages", [0, 40])
def test_flex_attention_over_the_page_table_keeps_greedy_tokens_exact(
    host_pages: int, reference: Replay, tiny_qwen3
) -> None:
    """The compiled FlexAttention path (CUDA's default) through holes, then host loads."""
    from penelope_engine.config import CacheConfig, EngineConfig

    cache = CacheConfig(4, SMALL_POOL, host_pages, "penelope")
    engine = Engine(EngineConfig(cache=cache, attention="flex"), loaded=tiny_qwen3)
    run = replay(engine)
    assert run.tokens == reference.tokens
    check_usage(run)
    if host_pages:
        assert sum(u.host_tokens for u in run.usage) > 0, "no page came back from the host"
    else:
        assert sum(u.recomputed_tokens for u in run.usage) > 0, "nothing was evicted: no test"
        assert any("hole" in w and w[-1] == "device" for w in run.segments), run.segments


def test_write_policy_off_leaves_the_host_tier_unused(reference: Replay, tiny_qwen3) -> None:
    from penelope_engine.config import CacheConfig, EngineConfig

    cache = CacheConfig(4, SMALL_POOL, 40, "penelope", write_policy="off")
    engine = Engine(EngineConfig(cache=cache), loaded=tiny_qwen3)
    run = replay(engine)
    assert run.tokens == reference.tokens
    assert engine.stats().pages_host_total == 0
    assert sum(u.host_tokens for u in run.usage) == 0


def test_concurrent_chunked_prefills_match_sequential_requests(
    reference: Replay, make_engine: Callable[..., Engine]
) -> None:
    """The first turns of all sessions at once, prefilled 8 tokens at a time."""
    engine = make_engine("penelope", max_batch_tokens=16, prefill_chunk=8)
    rng = np.random.default_rng(0)
    shared = rng.integers(0, 5000, 12).tolist()
    seqs = [
        engine.add_request(
            GenerateRequest(f"c{s}", tuple(shared + rng.integers(0, 5000, 20).tolist()), SAMPLING)
        )
        for s in range(SESSIONS)
    ]
    steps = 0
    while engine.has_work():
        engine.step()
        engine.check_integrity()
        steps += 1
    assert steps > 4  # the prompts really were chunked
    assert [tuple(s.tokens[s.prompt_len :]) for s in seqs] == reference.tokens[:SESSIONS]
    assert (
        engine.inspect().core.cache._device.num_used == 12 // 4 + SESSIONS * 5
    )  # one copy of the prefix


def test_tenants_never_share_cached_pages(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine()
    prompt = tuple(range(900, 932))
    for tenant, hit in (("acme", 0), ("globex", 0), ("acme", 28)):
        req = GenerateRequest(f"{tenant}-{hit}", prompt, SAMPLING, tenant=tenant)
        assert engine.generate_sync(req).usage.device_tokens == hit
    engine.check_integrity()


@pytest.mark.parametrize("retention", ["return_aware", "ttl"])
def test_agent_levers_keep_greedy_tokens_exact(
    retention: str, reference: Replay, tiny_qwen3
) -> None:
    """Aged order, backfill, pins (yielded, or held until a short TTL) and parking on
    preemption change what is cached when, never the tokens."""
    from penelope_engine.config import AgentConfig, CacheConfig, EngineConfig, SchedulerConfig

    agent = AgentConfig(
        admission="aged",
        backfill=True,
        retention=retention,
        default_ttl_s=0.05,
        max_pinned_fraction=0.6,
        park_on_preempt=True,
    )
    cache = CacheConfig(4, SMALL_POOL, 40, "greedydual")
    engine = Engine(
        EngineConfig(cache=cache, scheduler=SchedulerConfig(agent=agent)), loaded=tiny_qwen3
    )
    pinned = []
    on_turn_end = engine.inspect().core.scheduler._retention.on_turn_end

    def spy(*args, **kwargs):  # records whether each tool-use turn left a pin
        on_turn_end(*args, **kwargs)
        pinned.append(args[0] in engine.inspect().core.scheduler._retention.pins)

    engine.inspect().core.scheduler._retention.on_turn_end = spy  # type: ignore[method-assign]
    run = replay(engine)
    assert run.tokens == reference.tokens
    check_usage(run)
    assert any(pinned), "no turn was pinned: the lever was not exercised"
    assert sum(u.recomputed_tokens + u.host_tokens for u in run.usage) > 0
