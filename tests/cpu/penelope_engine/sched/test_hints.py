"""A harness's hints in a real tiny engine: retain, quotas, yielding, end, expected gap, parent.

Sessions here share nothing: each prompt is 40 random tokens (10 pages of 4),
and a turn generates 2, so a finished turn leaves 10 pages on its path.
"""

from __future__ import annotations

import numpy as np
import pytest

from penelope_engine.config import AgentConfig, CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.engine import Engine
from penelope_engine.errors import ConfigError, InvalidRequestError
from penelope_engine.hints import HintGrant, SessionHints
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import GenerateRequest, RequestOutput, SamplingParams

SAMPLING = SamplingParams(max_tokens=2, ignore_eos=True)


def engine(
    tiny_qwen3: LoadedModel,
    device_pages: int,
    host_pages: int = 0,
    policy: str = "penelope",
    pinned_fraction: float = 0.5,
    **cache: float | int | None,
) -> Engine:
    cc = CacheConfig(4, device_pages, host_pages, policy, **cache)  # type: ignore[arg-type]
    agent = AgentConfig(max_pinned_fraction=pinned_fraction)
    return Engine(EngineConfig(cache=cc, scheduler=SchedulerConfig(agent=agent)), loaded=tiny_qwen3)


def prompt(seed: int, n: int = 40) -> tuple[int, ...]:
    return tuple(np.random.default_rng(seed).integers(0, 5000, n).tolist())


def turn(
    e: Engine,
    rid: str,
    tokens: tuple[int, ...],
    sid: str | None,
    hints: SessionHints | None = None,
    tenant: str = "default",
) -> RequestOutput:
    req = GenerateRequest(
        rid, tokens, SAMPLING, sid, tenant, "tool_use", hints=hints or SessionHints()
    )
    out = e.generate_sync(req)
    e.check_integrity()
    return out


def private_device_pages(e: Engine, sid: str) -> int:
    info = e.inspect().core.sessions.get(sid)
    node, n = (info.leaf if info is not None else None), 0
    while node is not None and node.parent is not None:
        n += 0 if node.shared else node.n_device
        node = node.parent
    return n


@pytest.mark.parametrize("retain", [False, True])
def test_retain_s_keeps_a_session_on_the_device_through_another_sessions_turn(
    tiny_qwen3: LoadedModel, retain: bool
) -> None:
    e = engine(tiny_qwen3, device_pages=24)
    hints = SessionHints(retain_s=60.0) if retain else None
    a = turn(e, "a1", prompt(1), "a", hints)
    turn(e, "b1", prompt(2), "b")
    turn(e, "c1", prompt(3), "c")  # 11 pages with 4 free: the coldest session loses 7
    again = turn(e, "a2", prompt(1) + a.token_ids + prompt(4, 6), "a")
    if retain:
        assert a.hints == (HintGrant("retain_s", 60.0, 60.0),)
        assert again.usage.device_tokens == 40 and again.usage.recomputed_tokens == 0
        assert private_device_pages(e, "b") < 10  # the other session paid instead
    else:
        assert a.hints == ()
        assert again.usage.recomputed_tokens == 28
        assert again.usage.misses.evicted_device == 28


def test_retain_s_is_clipped_to_the_tenant_pin_seconds(tiny_qwen3: LoadedModel) -> None:
    e = engine(tiny_qwen3, device_pages=64, tenant_pin_seconds=5.0)
    out = turn(e, "a1", prompt(1), "a", SessionHints(retain_s=3600.0))
    assert out.hints == (HintGrant("retain_s", 3600.0, 5.0, "tenant_pin_seconds"),)
    pin = e.inspect().core.scheduler._retention.pins["a"]
    assert pin.hinted and pin.expires - e.inspect().core.sessions.now <= 5.0


def test_pinned_tokens_are_bounded_per_tenant(tiny_qwen3: LoadedModel) -> None:
    e = engine(tiny_qwen3, device_pages=128, tenant_pin_tokens=50)
    hints = SessionHints(retain_s=60.0)
    assert turn(e, "a1", prompt(1), "a", hints).hints[0].granted == 60.0  # 40 tokens
    refused = turn(e, "b1", prompt(2), "b", hints).hints[0]
    assert refused == HintGrant("retain_s", 60.0, 0.0, "tenant_pin_tokens")
    other = turn(e, "c1", prompt(3), "c", hints, tenant="other").hints[0]
    assert other.granted == 60.0  # another tenant has a quota of its own
    assert set(e.inspect().core.scheduler._retention.pins) == {"a", "c"}


def test_a_hinted_pin_yields_to_a_request_that_does_not_fit(tiny_qwen3: LoadedModel) -> None:
    e = engine(tiny_qwen3, device_pages=16, pinned_fraction=1.0)
    assert turn(e, "a1", prompt(1), "a", SessionHints(retain_s=600.0)).hints[0].granted == 600.0
    out = turn(e, "b1", prompt(2), "b")  # 11 pages; 6 free and a's 10 pinned
    assert out.finish_reason == "length" and "a" not in e.inspect().core.scheduler._retention.pins


@pytest.mark.parametrize("host_pages", [0, 32])
def test_end_session_takes_the_sessions_pages_off_the_device(
    tiny_qwen3: LoadedModel, host_pages: int
) -> None:
    e = engine(tiny_qwen3, device_pages=64, host_pages=host_pages)
    turn(e, "a1", prompt(1), "a", SessionHints(retain_s=30.0))
    assert private_device_pages(e, "a") == 10
    a = turn(e, "a2", prompt(1) + prompt(5, 8), "a", SessionHints(end_session=True))
    assert a.hints == (HintGrant("end_session", True, True),)
    assert (
        private_device_pages(e, "a") == 0 and "a" not in e.inspect().core.scheduler._retention.pins
    )
    assert e.inspect().core.cache._device.num_used == 0
    if host_pages:  # demoted: the next turn loads it from the host
        back = turn(e, "a3", prompt(1) + prompt(5, 8) + a.token_ids, "a")
        assert back.usage.host_tokens == 48


def test_expected_gap_s_picks_the_return_aware_victim(tiny_qwen3: LoadedModel) -> None:
    e = engine(tiny_qwen3, device_pages=30, policy="return_aware")
    turn(e, "a1", prompt(1), "a", SessionHints(expected_gap_s=900.0))
    turn(e, "b1", prompt(2), "b", SessionHints(expected_gap_s=1.0))
    # Unhinted, b (ended last) would be expected back last; hinted, a is back last.
    turn(e, "c1", prompt(3), "c")  # 11 pages with 10 free: one page of a victim goes
    assert private_device_pages(e, "a") < 10 and private_device_pages(e, "b") == 10


def test_expected_gap_s_sizes_a_learned_retention_pin(tiny_qwen3: LoadedModel) -> None:
    cc = CacheConfig(4, 64)
    # memory nearly free: a pin pays for the gap the harness expects (x GAP_SLACK)
    sched = SchedulerConfig(agent=AgentConfig(retention="return_aware", memory_price=1e-9))
    e = Engine(EngineConfig(cache=cc, scheduler=sched), loaded=tiny_qwen3)
    turn(e, "a1", prompt(1), "a", SessionHints(expected_gap_s=2.0))
    pin = e.inspect().core.scheduler._retention.pins["a"]
    assert not pin.hinted and pin.expires - e.inspect().core.sessions.now == pytest.approx(
        3.0, abs=0.5
    )


def test_parent_session_counts_the_parents_history_as_the_sub_agents(
    tiny_qwen3: LoadedModel,
) -> None:
    e = engine(tiny_qwen3, device_pages=64)
    parent = turn(e, "p1", prompt(1), "p")
    history = prompt(1) + parent.token_ids + prompt(6, 6)
    child = turn(e, "c1", history, "c", SessionHints(parent_session="p"))
    assert child.hints == (HintGrant("parent_session", "p", "p"),)
    assert child.usage.device_tokens == 40
    stranger = turn(e, "x1", history, "x", SessionHints(parent_session="p"), tenant="t2")
    assert stranger.hints == (HintGrant("parent_session", "p", None, "tenant"),)
    assert stranger.usage.device_tokens == 0  # pages are never shared across tenants
    unknown = turn(e, "u1", prompt(7), "u", SessionHints(parent_session="nobody"))
    assert unknown.hints[0].clipped_by == "unknown_parent"


def test_hints_of_a_request_without_a_session_are_reported_unused(
    tiny_qwen3: LoadedModel,
) -> None:
    e = engine(tiny_qwen3, device_pages=64)
    out = turn(e, "r1", prompt(1), None, SessionHints(retain_s=10.0, expected_gap_s=3.0))
    assert {g.hint: g.clipped_by for g in out.hints} == {
        "retain_s": "no_session",
        "expected_gap_s": "no_session",
    }
    assert not e.inspect().core.scheduler._retention.pins


def test_bad_hints_and_quotas_are_refused_at_construction() -> None:
    for bad in ({"retain_s": -1.0}, {"expected_gap_s": float("nan")}, {"parent_session": ""}):
        with pytest.raises(InvalidRequestError, match=next(iter(bad))):
            SessionHints(**bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="end_session"):
        SessionHints(retain_s=5.0, end_session=True)
    with pytest.raises(ConfigError, match="tenant_pin_seconds"):
        CacheConfig(tenant_pin_seconds=-1.0)
    with pytest.raises(ConfigError, match="tenant_pin_tokens"):
        CacheConfig(tenant_pin_tokens=-5)


def test_retain_s_zero_drops_even_a_learned_pin(tiny_qwen3: LoadedModel) -> None:
    sched = SchedulerConfig(agent=AgentConfig(retention="return_aware", memory_price=1e-9))
    e = Engine(EngineConfig(cache=CacheConfig(4, 64), scheduler=sched), loaded=tiny_qwen3)
    a = turn(e, "a1", prompt(1), "a")  # after tool_use: a learned pin (the default TTL)
    assert not e.inspect().core.scheduler._retention.pins["a"].hinted
    out = turn(e, "a2", prompt(1) + a.token_ids + prompt(8, 6), "a", SessionHints(retain_s=0.0))
    assert out.hints == (HintGrant("retain_s", 0.0, 0.0),)
    assert "a" not in e.inspect().core.scheduler._retention.pins
