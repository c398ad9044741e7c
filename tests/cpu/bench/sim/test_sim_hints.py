"""The miss ledger in the simulator's reports, and hint mode (`bench.sim.hints`)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from sim_testkit import growing_session, growing_workload

from bench.experiments import peers
from bench.experiments.peers import sim_config
from bench.sim.costmodel import CpuCostModel
from bench.sim.hints import TraceHints, next_gap
from bench.sim.loop import Simulator
from bench.sim.metrics import RunMetrics
from bench.sim.setups import hinted, setups
from bench.sim.turns import SimRequest, served_stop
from penelope_engine.protocol import MISS_CAUSES

# Slow prefill and copies, so that pins pay for some gaps and not others: the pin a gap
# hint sizes depends on the gap, and the noise on it changes the run.
SLOW = CpuCostModel(2e-3, 1e-3, 0.05e-6, 1e-4, kv_bytes_per_token=1 << 18, copy_bytes_per_s=1e8)
BUDGET = 1500  # device tokens per replica: memory binds for 8 sessions


def _run(name: str, replicas: int = 1, seed: int = 0, **cfg) -> tuple[Simulator, RunMetrics]:
    c = sim_config(setups([name])[0], BUDGET, 1.0, replicas)
    c = dataclasses.replace(c, page_size=16, **cfg)
    sim = Simulator(growing_workload(8, seed), c, SLOW, seed)
    m = sim.run()
    for rep in sim.replicas:
        rep.cache.check_integrity(request_pages=0)
    return sim, m


def _figures(m: RunMetrics) -> dict:
    d = m.as_dict(with_ttfts=True)
    d.pop("wall_time_s")
    return d


@pytest.mark.parametrize(
    ("name", "replicas"), [("penelope", 1), ("sglang-radix/pow2", 2), ("continuum/pow2", 2)]
)
def test_the_miss_causes_sum_to_the_computed_tokens_of_every_request(
    name: str, replicas: int
) -> None:
    sim, m = _run(name, replicas)
    for r in sim.requests:
        assert r.misses.total == r.recomputed_tokens + r.new_tokens, (r.session_id, r.turn)
    assert sum(m.miss_tokens.values()) == sum(
        r.recomputed_tokens + r.new_tokens for r in sim.requests
    )
    assert list(m.miss_tokens) == list(MISS_CAUSES)
    lost = m.miss_tokens["evicted_device"] + m.miss_tokens["dropped_host"]
    assert lost > 0  # memory binds: the cache lost history
    if replicas > 1:  # pow2 moves sessions: the ledger says so
        assert m.miss_tokens["moved_replica"] > 0
    ratios = m.miss_ratios()
    assert set(ratios) == {f"miss_{c}_ratio" for c in MISS_CAUSES}
    computed = sum(r.recomputed_tokens + r.new_tokens for r in sim.requests)
    assert sum(ratios.values()) == pytest.approx(computed / m.prompt_tokens)


def test_trace_hints_follow_tool_calls_only_with_seeded_noise_and_end_after_the_last() -> None:
    s = growing_session(3)
    exact = TraceHints(0.0, seed=0)
    for k in range(len(s.turns) - 1):
        h = exact.after_turn(s, k)
        if s.turns[k].stop_reason == "tool_use":  # a harness knows the tool call then
            assert h is not None and not h.end_session
            assert h.expected_gap_s == next_gap(s, k) == s.turns[k + 1].think_time_s
        else:  # a person answers: nobody knows when
            assert h is None
    last = exact.after_turn(s, len(s.turns) - 1)
    assert last is not None and last.end_session and last.expected_gap_s is None
    assert math.isinf(next_gap(s, len(s.turns) - 1))
    noisy = [TraceHints(0.5, seed).after_turn(s, 1) for seed in (0, 0, 1)]
    gaps = [h.expected_gap_s for h in noisy if h is not None]
    exact_gap = exact.after_turn(s, 1)
    assert exact_gap is not None
    assert gaps[0] == gaps[1] != gaps[2] and gaps[0] != exact_gap.expected_gap_s
    user = dataclasses.replace(
        s, turns=[dataclasses.replace(t, stop_reason="end_turn") for t in s.turns]
    )
    assert [exact.after_turn(user, k) for k in range(len(s.turns) - 1)] == [None] * (
        len(s.turns) - 1
    )
    with pytest.raises(ValueError):
        TraceHints(-1.0, 0)


def test_the_engine_gets_only_the_served_stop_reasons() -> None:
    assert served_stop("tool_use") == "tool_use"
    assert served_stop("end_turn") == served_stop("") == served_stop("max_tokens") == "end_turn"
    tokens = np.arange(40, dtype=np.int64)
    for trace, served in (("tool_use", "tool_use"), ("", "end_turn"), ("max_tokens", "end_turn")):
        req = SimRequest("s", 0, 0.0, 32, 8, tokens, np.zeros(2, np.uint64), 0, 0, trace)
        assert req.sequence(0.0).req.stop_reason_hint == served


def test_hint_mode_reaches_the_scheduler_and_changes_the_run() -> None:
    base_sim, base = _run("penelope")
    sim, m = _run("penelope+hints", hint_noise=0.0)
    assert base.hint_grants == {}
    # after each tool call but a session's last turn: expected_gap_s; after its last reply:
    # end_session; the requests themselves carry none
    tools = sum(
        t.stop_reason == "tool_use" for s in sim.workload.all_sessions for t in s.turns[:-1]
    )
    assert m.hint_grants == {"end_session": m.sessions, "expected_gap_s": tools}
    assert _figures(m) != _figures(base)
    assert _figures(_run("penelope+hints", hint_noise=0.0)[1]) == _figures(m)  # repeatable
    noisy = _run("penelope+hints", hint_noise=0.25)[1]
    assert _figures(noisy) != _figures(m)
    assert _figures(_run("penelope+hints", hint_noise=0.25)[1]) == _figures(noisy)  # seeded
    assert _figures(_run("penelope+hints", seed=1, hint_noise=0.25)[1]) != _figures(noisy)


def test_only_engines_with_a_hint_api_get_hints() -> None:
    peer, ours = setups(["sglang-hicache/pow2", "penelope"])
    assert hinted(peer) is peer and not sim_config(hinted(peer), BUDGET, 1.0, 1).hints
    assert (
        sim_config(hinted(ours), BUDGET, 1.0, 1).hints
        and not sim_config(ours, BUDGET, 1.0, 1).hints
    )
    assert hinted(ours).levers["hints"] and hinted(ours, on=False) is ours
    assert setups(["penelope+hints"])[0].levers["hints"]
    off = _run("sglang-radix/pow2", 2)[1]
    on = _run("sglang-radix/pow2", 2, hints=True)[1]  # the switch itself works for any cache
    assert on.hint_grants and not off.hint_grants


def test_peers_reports_misses_per_set_up_and_runs_hint_mode(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    argv = ["--lengths", "quarter", "--sessions", "2", "--seeds", "1", "--replicas", "1"]
    argv += ["--setups", "sglang-radix/pow2,penelope", "--hints", "--hint-noise", "0.5"]
    assert peers.main([*argv, "--device-budget-tokens", "40000", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    runs = {r["name"]: r for r in doc["runs"]}
    assert runs["penelope"]["levers"]["hints"] and not runs["sglang-radix/pow2"]["levers"]["hints"]
    for r in runs.values():
        total = sum(r[f"miss_{c}_ratio"] for c in MISS_CAUSES)
        assert 0 < total <= 1 and f"miss_{MISS_CAUSES[0]}_ratio" in r["per_seed"]
    assert doc["config"]["hints"] and doc["config"]["hint_noise"] == 0.5
