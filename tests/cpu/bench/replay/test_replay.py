"""`bench replay`: agent sessions through the real engine in wall-clock time, and calibration."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.replay import calibrate
from bench.replay.cli import build_parser, main, saved_replay_argv
from bench.replay.replayloop import EngineReplay
from bench.replay.runs import workloads
from bench.sessions import Scale, Session, Trace, Turn
from bench.sim.config import SimConfig
from bench.sim.oracle import policy_for_config
from bench.sim.report import row
from bench.tokens import TokenMap
from bench.workload import Workload, WorkloadConfig, sample_workload
from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.engine import Engine
from penelope_engine.model.registry import LoadedModel

PS = 16
THINK = 0.15


def _session(i: int) -> Session:
    """Two turns of a growing history (4 then 8 blocks of 32 tokens) after a 64-token prefix."""
    turns = tuple(
        Turn(THINK if k else 0.0, 0.0, ((1, 4 + 4 * k),), (4 + 4 * k) * 32 + 5, 4, "tool_use", 64)
        for k in range(2)
    )
    return Session(f"s{i}", turns, 32, f"s{i}")


def _workload() -> Workload:
    trace = Trace("claude_code", (_session(0), _session(1)), Scale(), 32)
    return sample_workload(trace, WorkloadConfig(2, seed=0, mean_interarrival_s=0.01))


def _replay(lm: LoadedModel, policy: str, device_tokens: int, host_tokens: int = 0):
    name, obj = policy_for_config(policy)
    cache = CacheConfig(PS, device_tokens // PS, host_tokens // PS, name)
    rep = EngineReplay(
        lambda h, b: Engine(EngineConfig(cache=cache), lm, hooks=h, bench=replace(b, policy=obj)),
        _workload(),
        TokenMap(lm.config.vocab_size),
    )
    engine = rep.engine
    metrics = rep.run()
    engine.check_integrity()
    return rep, metrics, engine.stats()


def test_every_turn_completes_in_order_with_its_tool_gap(tiny_qwen3: LoadedModel) -> None:
    rep, m, stats = _replay(tiny_qwen3, "lru", 4096)
    assert (m.requests, m.sessions, m.failed_requests) == (4, 2, 0)
    # roomy: turn 2 reuses turn 1
    assert m.recompute_ratio == 0.0 and stats.tokens.device_tokens > 0
    by = {(r.session_id, r.turn): r for r in rep.requests}
    for sid in ("s0", "s1"):
        first, second = by[(sid, 0)], by[(sid, 1)]
        assert second.arrival - first.finished_at == pytest.approx(THINK)
        assert first.arrival <= first.admitted_at <= first.first_token_at <= first.finished_at
        assert second.history_class == "full"
    assert rep.timer.samples and all(t > 0 for _, t in rep.timer.samples)


def test_next_turn_repeats_the_generated_answer_and_finds_it_cached(
    tiny_qwen3: LoadedModel,
) -> None:
    turns = tuple(
        Turn(THINK if k else 0.0, 0.0, ((1, 4 + 4 * k),), (4 + 4 * k) * 32 + 5, 16, "tool_use", 64)
        for k in range(2)
    )
    trace = Trace("claude_code", (Session("s0", turns, 32, "s0"),), Scale(), 32)
    config = EngineConfig(cache=CacheConfig(PS, 256, 0, "lru"))
    rep = EngineReplay(
        lambda h, b: Engine(config, loaded=tiny_qwen3, hooks=h, bench=b),
        sample_workload(trace, WorkloadConfig(1)),
        TokenMap(tiny_qwen3.config.vocab_size),
    )
    engine = rep.engine
    rep.run()
    first, second = rep.requests
    # turn 1 ran 133 prompt + 15 fed-back output tokens: 9 full pages, and turn 2's
    # prompt repeats the generated answer, so it finds all 9 (the trace's own output
    # tokens would have matched only the 8 pages of turn 1's prompt)
    assert (first.prompt_tokens, second.device_tokens) == (133, 9 * PS)
    engine.check_integrity()


@pytest.mark.parametrize("policy", ["lru", "return_aware", "oracle"])
def test_forced_eviction_recomputes_gpu_only_and_loads_with_a_host_tier(
    tiny_qwen3: LoadedModel, policy: str
) -> None:
    budget = 20 * PS  # one 17-page turn fits, two sessions' histories do not
    rep, m, stats = _replay(tiny_qwen3, policy, budget)
    assert m.failed_requests == 0 and m.requests == 4
    assert stats.tokens.recomputed_tokens > 0 and m.recompute_ratio > 0
    # the miss ledger: every request's computed tokens split by cause, exactly; the
    # evicted history is named as such, not as new
    for r in rep.requests:
        assert r.misses.total == r.recomputed_tokens + r.new_tokens, (r.session_id, r.turn)
    assert sum(r.misses.evicted_device for r in rep.requests) > 0
    rep, m, stats = _replay(tiny_qwen3, policy, budget, host_tokens=64 * PS)
    assert m.failed_requests == 0 and m.requests == 4
    assert stats.tokens.host_tokens > 0 and stats.tokens.recomputed_tokens == 0
    for r in rep.requests:
        assert r.misses.total == r.recomputed_tokens + r.new_tokens, (r.session_id, r.turn)


def test_calibration_fits_the_engine_and_predicts_the_replay(tiny_qwen3: LoadedModel) -> None:
    sweep = calibrate.timing_sweep(
        tiny_qwen3,
        PS,
        SchedulerConfig(),
        calibrate.SweepConfig(
            offsets=(0, 2048), chunks=(16, 512), decode_contexts=(128,), decode_batches=(1, 4)
        ),
    )
    cost = calibrate.fit_cpu_cost(sweep, tiny_qwen3.config.kv_bytes_per_token(4))
    assert cost.token_cost(2048) > cost.token_cost(0) > 0  # attention makes late tokens dearer
    assert calibrate.relative_errors(cost, sweep)["median"] < 0.5
    setup = {"policy": "lru", "tiers": "gpu", "router": "pow2", "replicas": 1}
    setup |= {"device_budget_tokens": 4096, "host_budget_tokens": 0}
    _, m, _ = _replay(tiny_qwen3, "lru", 4096)
    base = SimConfig(page_size=PS, scheduler=SchedulerConfig(), vocab_size=151669)
    (cmp,) = calibrate.compare([row(setup, [m])], {0: _workload()}, cost, base)
    assert cmp["replay_mean_ttft_s"] == pytest.approx(m.mean_ttft_s)
    assert cmp["sim_mean_ttft_s"] > 0 and abs(cmp["error"]) < 5


def test_cli_replays_claude_code_sessions_into_the_issue_schema(tmp_path: Path, capsys) -> None:
    out = tmp_path / "replay.json"
    argv = ["--sessions", "2", "--turns", "2", "--seed-base", "1"]  # seed 1: two short sessions
    argv += ["--policies", "lru,return_aware", "--tiers", "gpu,gpu+cpu", "--time-scale", "0.01"]
    assert main([*argv, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    cfg = doc["config"]
    assert cfg["torch_threads"] >= 1 and cfg["time_scale"] == 0.01 and cfg["seeds"] == [1]
    assert cfg["length_scale"] == 1 / 64 and cfg["trace"] == "claude_code"
    assert len(doc["runs"]) == 4
    for r in doc["runs"]:
        for key in ("policy", "tiers", "router", "replicas", "device_budget_tokens", "seeds"):
            assert key in r
        for key in ("mean_ttft_s", "p90_ttft_s", "mean_jct_s", "mean_llm_time_s", "hit_ratio"):
            assert r[key] >= 0
        assert r["partial_return_ratio"] >= 0 and r["recompute_ratio"] >= 0
        assert len(r["mean_ttft_s_spread"]) == 2 and r["failed_requests"] == 0
        assert r["requests"] == doc["runs"][0]["requests"] > 0
    assert "policy" in capsys.readouterr().out  # the table
    # --recalibrate rebuilds the same workloads from the saved settings
    again = build_parser().parse_args(saved_replay_argv(cfg))
    first = build_parser().parse_args(argv)
    assert workloads(again)[0][1].sessions == workloads(first)[0][1].sessions
    assert (again.turns, again.time_scale, again.seed_base) == (2, 0.01, 1)


def test_working_set_counts_each_distinct_prefix_run_once() -> None:
    from bench.replay.runs import working_set_tokens
    from bench.sessions import SYSTEM, TOOLS, PrefixBlock

    def session(sid: str, system: str, tools: str, longest: int) -> Session:
        blocks = (PrefixBlock(SYSTEM, system, 100), PrefixBlock(TOOLS, tools, 50))
        turn = Turn(0.0, 0.0, ((1, 4),), longest - 10, 10, "tool_use", 150)
        return Session(sid, (turn,), 32, sid, prefix_blocks=blocks)

    sessions = (
        session("a", "s1", "t1", 400),  # own: 250
        session("b", "s1", "t1", 300),  # own: 150; its prefix is a's
        session("c", "s1", "t2", 200),  # own: 50; s1 again, new tools after it
        session("d", "s2", "t1", 200),  # own: 50; t1 after s2 is another copy of t1
    )
    wl = Workload(sessions, (0.0,) * 4, {}, WorkloadConfig(4), {})
    # runs: (s1) 100, (s1,t1) 50, (s1,t2) 50, (s2) 100, (s2,t1) 50
    assert working_set_tokens(wl) == (250 + 150 + 50 + 50) + (100 + 50 + 50 + 100 + 50)


def test_named_caches_replay_each_engine_with_its_levers_and_agree_on_the_ratio(
    tmp_path: Path,
) -> None:
    from bench.replay.runs import scheduler_config, setup_grid
    from bench.sim.setups import CACHES

    out = tmp_path / "caches.json"
    argv = ["--sessions", "2", "--turns", "2", "--seed-base", "1", "--time-scale", "0.01"]
    argv += ["--caches", "sglang-hicache,penelope", "--max-batch-tokens", "1024"]
    args = build_parser().parse_args(argv)
    grid = setup_grid(args, [4096])
    assert [(s["cache"], s["policy"], s["tiers"]) for s in grid] == [
        ("sglang-hicache", "lru", "gpu+cpu"),
        ("penelope", CACHES["penelope"].policy, "gpu+cpu"),
    ]
    assert all(s["host_budget_tokens"] == 4096 for s in grid)  # host factor 1 by default
    peer, ours = (scheduler_config(args, s["cache"]) for s in grid)
    assert (peer.max_batch_tokens, peer.prefill_chunk, peer.agent) == (
        1024,
        1024,
        CACHES["sglang-hicache"].agent,
    )
    assert (ours.max_batch_tokens, ours.prefill_chunk) == (1024, 256)  # a quarter of the step
    assert ours.agent == CACHES["penelope"].agent and ours.agent.backfill
    assert main([*argv, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["cache"] for r in doc["runs"]] == ["sglang-hicache", "penelope"]
    assert doc["config"]["caches"] == ["sglang-hicache", "penelope"]
    assert "--caches" in saved_replay_argv(doc["config"])
    with pytest.raises(SystemExit):  # an unknown cache is a usage error
        build_parser().parse_args([*argv[:-4], "--caches", "sglang-radix,nothing"])


def test_ratio_agreement_compares_each_setup_with_its_groups_first() -> None:
    def cmp(cache: str | None, policy: str, replay: list[float], sim: list[float]) -> dict:
        return {
            "cache": cache, "policy": policy, "tiers": "gpu+cpu", "device_budget_tokens": 64,
            "replay_mean_ttft_s": sum(replay) / 2, "sim_mean_ttft_s": sum(sim) / 2,
            "per_seed_replay_s": replay, "per_seed_sim_s": sim,
        }  # fmt: skip

    rows = [
        cmp("sglang-hicache", "lru", [2.0, 2.0], [1.0, 3.0]),
        cmp("penelope", "greedydual", [1.0, 1.0], [0.4, 1.2]),
        cmp(None, "lru", [5.0, 5.0], [5.0, 5.0]),  # a policy row: its own group, no ratio
    ]
    (q,) = calibrate.ratio_agreement(rows)
    assert (q["setup"], q["reference"]) == ("penelope", "sglang-hicache")
    assert q["replay_ratio"] == pytest.approx(0.5) and q["sim_ratio"] == pytest.approx(0.4)
    assert q["error"] == pytest.approx(0.4 / 0.5 - 1)
    assert q["per_seed_replay_ratio"] == [0.5, 0.5]
    assert q["per_seed_sim_ratio"] == pytest.approx([0.4, 0.4])
