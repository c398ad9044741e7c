"""The discrete-event simulator over the real PrefixCache, policies and routing core."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sim_testkit import PREFIX, growing_session, growing_workload

from bench.sessions import SYSTEM, TOOLS, PrefixBlock, Scale, Session, Trace, Turn
from bench.sim.config import SimConfig
from bench.sim.costmodel import CpuCostModel, StepLoad, step_load
from bench.sim.loop import Simulator
from bench.sim.oracle import SIM_EVICTION_POLICIES
from bench.sim.replica import SimRequest
from bench.workload import Workload, WorkloadConfig, sample_workload
from penelope_engine.protocol import GenerateRequest
from penelope_engine.sched.sequence import BatchItem, Sequence
from router.schema import ROUTE_PREFIX_PAGES, RouteRequest

COST = CpuCostModel(2e-3, 50e-6, 0.05e-6, 1e-4, kv_bytes_per_token=4096, copy_bytes_per_s=4e9)


def _cfg(**kw) -> SimConfig:
    base = dict(policy="lru", device_budget_tokens=20_000, page_size=16)
    return SimConfig(**{**base, **kw})


def _run(cfg: SimConfig, n: int = 6, seed: int = 0) -> Simulator:
    sim = Simulator(growing_workload(n, seed), cfg, COST, seed=seed)
    sim.metrics = sim.run()
    for rep in sim.replicas:
        rep.cache.check_integrity(request_pages=0)  # nothing runs any more
    return sim


def _summary(sim: Simulator) -> dict:
    d = sim.metrics.as_dict(with_ttfts=True)
    d.pop("wall_time_s")
    return d


def test_same_seed_same_result_and_seeds_differ() -> None:
    a, b = _run(_cfg(device_budget_tokens=2_500)), _run(_cfg(device_budget_tokens=2_500))
    assert _summary(a) == _summary(b)
    c = _run(_cfg(device_budget_tokens=2_500), seed=1)
    assert _summary(c) != _summary(a)


def test_every_turn_is_served_in_a_closed_loop() -> None:
    sim = _run(_cfg())
    assert sim.metrics.requests == 36 and sim.metrics.sessions == 6
    by = {(r.session_id, r.turn): r for r in sim.requests}
    for s in sim.workload.sessions:
        for k in range(1, len(s.turns)):
            gap = by[(s.id, k)].arrival - by[(s.id, k - 1)].finished_at
            assert gap == pytest.approx(s.turns[k].think_time_s)
    for r in sim.requests:
        assert r.arrival < r.first_token_at <= r.finished_at
        parts = r.device_tokens + r.host_tokens + r.store_tokens
        assert parts + r.recomputed_tokens + r.new_tokens == r.prompt_tokens


def test_roomy_cache_never_recomputes() -> None:
    m = _run(_cfg(device_budget_tokens=200_000)).metrics
    assert m.recompute_ratio == 0.0 and m.partial_return_ratio == 0.0
    assert m.hit_ratio > 0.6


def test_tight_cache_recomputes_history() -> None:
    sim = _run(_cfg(device_budget_tokens=2_000))
    assert sim.metrics.recompute_ratio > 0.05
    assert sim.metrics.hit_ratio < _run(_cfg(device_budget_tokens=200_000)).metrics.hit_ratio
    assert {r.history_class for r in sim.requests} >= {"first", "miss"}


@pytest.mark.parametrize("policy", sorted(SIM_EVICTION_POLICIES))
def test_every_policy_runs_tiers_and_keeps_pools_consistent(policy: str) -> None:
    gpu = _run(_cfg(policy=policy, device_budget_tokens=2_000)).metrics
    two = _run(
        _cfg(policy=policy, device_budget_tokens=2_000, tiers="gpu+cpu", host_budget_tokens=50_000)
    ).metrics
    assert gpu.requests == two.requests == 36
    assert two.hit_ratio > gpu.hit_ratio


def test_affinity_keeps_sessions_home_and_pow2_scatters_them() -> None:
    homes, hits = {}, {}
    for router in ("pow2", "affinity"):
        sim = _run(_cfg(replicas=3, router=router, device_budget_tokens=3_000), n=8)
        assert sim.metrics.requests == 48
        per_session: dict[str, set[int]] = {}
        for r in sim.requests:
            per_session.setdefault(r.session_id, set()).add(r.replica)
        homes[router] = sum(len(h) for h in per_session.values()) / len(per_session)
        hits[router] = sim.metrics.hit_ratio
    assert homes["affinity"] <= 1.25 < 2.0 <= homes["pow2"]
    assert hits["affinity"] > hits["pow2"]


def _keyed_workload(n: int = 6, seed: int = 0) -> Workload:
    """Sessions whose prefix is a 40-token system prompt and 56 tokens of tool schemas
    (keys alternate between two tool sets); s0 has no tools, only a 96-token system prompt."""
    sessions = []
    for i in range(n):
        s = growing_session(i)
        blocks = (
            (PrefixBlock(SYSTEM, "sys", PREFIX),)
            if i == 0
            else (PrefixBlock(SYSTEM, "sys", 40), PrefixBlock(TOOLS, f"tools{i % 2}", 56))
        )
        sessions.append(dataclasses.replace(s, prefix_blocks=blocks))
    trace = Trace("claude_code", tuple(sessions), Scale(), 64)
    return sample_workload(trace, WorkloadConfig(n, seed=seed, mean_interarrival_s=0.5))


def _routed(router: str, wl: Workload) -> tuple[Simulator, list[tuple[SimRequest, RouteRequest]]]:
    """A run with `router`, and each request beside what the router was shown."""
    sim = Simulator(wl, _cfg(replicas=2, router=router, device_budget_tokens=3_000), COST)
    made: dict[str, SimRequest] = {}
    seen: list[tuple[SimRequest, RouteRequest]] = []
    make, choose = sim._request, sim.router.choose

    def request(st, k):
        made[f"{st.session.id}:{k}"] = req = make(st, k)
        return req

    def route(views, rr):
        seen.append((made[rr.request_id], rr))
        return choose(views, rr)

    sim._request, sim.router.choose = request, route  # type: ignore[method-assign]
    sim.metrics = sim.run()
    return sim, seen


def test_text_matching_routers_see_the_prompt_without_the_tool_schemas() -> None:
    sim, seen = _routed("ray_prefix", _keyed_workload())
    assert sim.metrics.requests == 36 and len(seen) == 36
    ps = sim.cfg.page_size
    for req, rr in seen:
        engine = req.hashes
        assert rr.prefix_hashes == tuple(engine[:ROUTE_PREFIX_PAGES].tolist())  # the engine's
        prompt = req.tokens[: req.prompt_len]
        if req.session_id == "s0":  # no tools: the router sees the engine's pages
            assert rr.prompt_pages == tuple(engine.tolist())
            continue
        text = np.concatenate([prompt[:40], prompt[96:]])
        assert rr.prompt_pages == tuple(sim.hasher.hashes(text).tolist())
        assert len(rr.prompt_pages) == (req.prompt_len - 56) // ps < len(engine)
        assert rr.prompt_pages[: 40 // ps] == tuple(engine[: 40 // ps].tolist())  # system
        assert not set(engine[40 // ps + 1 : 96 // ps].tolist()) & set(rr.prompt_pages)
    first = {req.session_id: (req, rr) for req, rr in seen if req.turn == 0}
    # equal keys share the engine's prefix pages; different tools share only the system's
    for a, b, pages in (("s1", "s3", 96 // ps), ("s1", "s2", 40 // ps)):
        assert np.array_equal(first[a][0].hashes[:pages], first[b][0].hashes[:pages])
        assert first[a][0].hashes[pages] != first[b][0].hashes[pages]


def test_routers_that_read_no_prompt_get_no_pages_and_runs_repeat() -> None:
    _, seen = _routed("affinity", _keyed_workload())
    assert all(rr.prompt_pages == () for _, rr in seen)
    a, _ = _routed("sgl_cache_aware", _keyed_workload())
    b, _ = _routed("sgl_cache_aware", _keyed_workload())
    assert _summary(a) == _summary(b)


def test_a_turn_larger_than_the_device_fails_alone() -> None:
    wl = growing_workload(2)
    big = dataclasses.replace(wl.sessions[0].turns[1], input_tokens=5_000, block_runs=((1, 150),))
    s0 = dataclasses.replace(
        wl.sessions[0], turns=(wl.sessions[0].turns[0], big, *wl.sessions[0].turns[2:])
    )
    wl = dataclasses.replace(wl, sessions=(s0, *wl.sessions[1:]))
    m = Simulator(wl, _cfg(device_budget_tokens=3_000), COST).run()
    assert m.failed_requests == 1 and m.requests == 11


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="tiers"):
        _cfg(tiers="gpu+ssd")
    with pytest.raises(ValueError, match="host_budget_tokens"):
        _cfg(tiers="gpu+cpu")
    with pytest.raises(ValueError, match="router"):
        _cfg(router="random")
    with pytest.raises(KeyError, match="valid"):
        _cfg(policy="fifo")


def test_step_load_counts_attention_pairs_over_segments() -> None:
    """The one measure of a batch, for the engine's timer and the simulator's clock."""
    seq = Sequence(GenerateRequest("r", (0,)), np.empty(0, np.uint64), [0])
    chunk = BatchItem(seq, np.array([10, 11, 12, 13, 30, 31]), True)
    decode = BatchItem(seq, np.array([40]), True)
    load = step_load([chunk, decode])
    assert load.attention_pairs == sum(p + 1 for p in (10, 11, 12, 13, 30, 31, 40))
    assert load.kv_read_tokens == 32 + 41 and load.tokens == 7
    assert load.logit_rows == 2 and load.sequences == 2


def test_times_follow_the_cost_model_for_a_lone_request() -> None:
    turn = Turn(0.0, 0.0, ((1, 30),), 30 * 32 + 5, 4, "end_turn", PREFIX)
    trace = Trace("claude_code", (Session("solo", (turn,), 32, "solo"),), Scale(), 64)
    wl = sample_workload(trace, WorkloadConfig(1))
    sim = Simulator(wl, _cfg(device_budget_tokens=4_096), COST)
    m = sim.run()
    prefill = COST.step_time(StepLoad.of([(965, 0)], []))
    decodes = sum(COST.step_time(StepLoad.of([], [965 + i])) for i in range(3))
    assert m.mean_ttft_s == pytest.approx(prefill)
    assert m.mean_jct_s == pytest.approx(prefill + decodes)


def test_router_options_reach_the_routing_core() -> None:
    sim = Simulator(growing_workload(2), _cfg(router="affinity", prefix_affinity=False), COST)
    assert sim.router.name == "affinity" and sim.router.config.prefix_affinity is False
    assert sim.run().requests == 12


@pytest.mark.parametrize(
    "kw",
    [
        dict(device_budget_tokens=2_000),
        dict(device_budget_tokens=2_000, tiers="gpu+cpu", host_budget_tokens=50_000),
        dict(device_budget_tokens=200_000, policy="greedydual"),
        dict(device_budget_tokens=3_000, replicas=2, router="pow2"),
    ],
)
def test_ttft_and_llm_time_floors_bound_every_request_and_match_across_setups(kw: dict) -> None:
    sim = _run(_cfg(**kw))
    for s in sim.sessions:
        assert s.llm_floor_s is not None and 0 < s.llm_floor_s <= s.llm_time + 1e-12
    for r in sim.requests:  # no cache or scheduler beats the TTFT floor either
        assert r.ttft_floor_s is not None and 0 < r.ttft_floor_s <= r.ttft + 1e-12
    roomy = _run(_cfg(device_budget_tokens=200_000))
    assert sim.metrics.mean_llm_floor_s == pytest.approx(roomy.metrics.mean_llm_floor_s)
    assert sim.metrics.mean_ttft_floor_s == pytest.approx(roomy.metrics.mean_ttft_floor_s)


def test_llm_time_floor_is_nearly_reached_by_a_lone_session_with_room() -> None:
    trace = Trace("claude_code", (growing_session(0),), Scale(), 64)
    sim = Simulator(
        sample_workload(trace, WorkloadConfig(1)), _cfg(device_budget_tokens=200_000), COST
    )
    m = sim.run()
    # left above the floor: the first turn's shared prefix (nothing cached it yet)
    # and each turn's last partial page, recomputed
    assert m.mean_llm_floor_s < m.mean_llm_time_s < 1.1 * m.mean_llm_floor_s


@pytest.mark.parametrize("tiers", ["gpu", "gpu+cpu"])
def test_decode_runs_as_one_event_give_the_times_of_stepping_one_by_one(tiers: str) -> None:
    kw = dict(tiers=tiers, host_budget_tokens=4_000, device_budget_tokens=2_500)
    fast = _run(_cfg(**kw))
    slow = _run(_cfg(**kw, fast_decode=False))
    a, b = fast.requests, slow.requests
    assert [(r.session_id, r.turn) for r in a] == [(r.session_id, r.turn) for r in b]
    for x, y in zip(a, b, strict=True):
        assert (x.device_tokens, x.host_tokens, x.recomputed_tokens, x.new_tokens) == (
            y.device_tokens,
            y.host_tokens,
            y.recomputed_tokens,
            y.new_tokens,
        )
        assert x.first_token_at == pytest.approx(y.first_token_at, rel=1e-9, abs=1e-9)
        assert x.finished_at == pytest.approx(y.finished_at, rel=1e-9, abs=1e-9)
