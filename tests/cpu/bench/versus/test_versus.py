"""`penelope bench versus` against `penelope serve` alone (no vLLM): two Penelope servers
(shipped and `--policy lru`) started cold by `--start`, a small workload, the JSON read back;
and the plan and the capacity read-back on their own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.net import free_port
from bench.sim.costmodel import CpuCostModel
from bench.versus.cli import config_from, main, parse
from bench.versus.config import REGIMES, ServerSpec, VersusConfig
from bench.versus.plan import make_plan
from bench.versus.predict import predict
from bench.versus.report import mean_jct_s
from bench.versus.servers import log_capacity, vllm_metrics_capacity
from bench.versus.turns import turn_summary, turns_table, versus_turns

ROOT = Path(__file__).resolve().parents[4]
SMALL = VersusConfig(
    (ServerSpec("a", "http://127.0.0.1:1"),),
    sessions=3,
    max_turns=3,
    max_output_tokens=2,
    window_tokens=768,
    mean_interarrival_s=0.2,
    max_gap_s=0.3,
)


def serve_cmd(policy: str) -> str:
    return (
        f"cd {ROOT} && PYTHONPATH={ROOT} OMP_NUM_THREADS=1 {sys.executable} -m penelope_cli.cli "
        f"serve --model tiny-qwen3 --port {{port}} --device-pages {{kv_blocks}} --host-pages 0 "
        f"--page-size 16 --policy {policy} --store-uri none --log-level warning"
    )


def test_each_later_turn_extends_the_last_and_sessions_share_their_prefix() -> None:
    plan = make_plan(SMALL, 0)
    assert plan.sessions and plan.requests == sum(len(s.turns) for s in plan.sessions)
    wl = {s.id: s for s in plan.workload.sessions}
    for s in plan.sessions:
        assert all(len(t.prompt) + t.max_tokens <= SMALL.window_tokens for t in s.turns)
        for k, (a, b) in enumerate(zip(s.turns, s.turns[1:])):
            # turn k+1 = turn k's prompt, then the stand-in reply, then new ids
            if wl[s.id].turns[k + 1].input_tokens >= len(a.prompt) + a.max_tokens:
                assert b.prompt[: len(a.prompt)] == a.prompt
    firsts = [(wl[s.id].prefix_blocks, s.turns[0].prompt) for s in plan.sessions]
    for (pa, a), (pb, b) in zip(firsts, firsts[1:]):
        if pa and pb and pa[0] == pb[0]:  # the same system prompt: the same ids
            n = pa[0].tokens
            assert a[:n] == b[:n]
    assert make_plan(SMALL, 0) == plan  # deterministic


def _rec(session: str, turn: int, prompt: int, cached: int, **misses: int) -> dict:
    return {"session": session, "turn": turn, "prompt_tokens": prompt, "cached_tokens": cached,
            "ttft_s": 1.0 + turn, "error": "", "miss_tokens": misses}  # fmt: skip


def test_returning_turns_are_tallied_turn_by_turn_against_the_baseline() -> None:
    ours = [_rec("a", 0, 100, 0, first=100), _rec("a", 1, 200, 190, evicted=10),
            _rec("b", 1, 200, 20, evicted=180), _rec("c", 1, 100, 90)]  # fmt: skip
    theirs = [_rec("a", 0, 100, 0), _rec("a", 1, 200, 10), _rec("b", 1, 200, 200),
              _rec("c", 1, 100, 100)]  # fmt: skip
    t = turn_summary(ours)
    assert (t["first_turns"], t["returning_turns"], t["returning_warm"]) == (1, 3, 2)
    assert t["returning_miss_tokens"] == {"evicted": 190}
    assert t["first_mean_ttft_s"] == 1.0 and t["returning_mean_ttft_s"] == 2.0
    runs = [{"server": s, "kv_tokens": 64, "seed": 0, "records": r, "turns": turn_summary(r)}
            for s, r in (("p", ours), ("v", theirs))]  # fmt: skip
    (pair,) = versus_turns(runs, "v")
    assert {k: pair[k] for k in ("both", "ours_only", "theirs_only", "neither")} == {
        "both": 1, "ours_only": 1, "theirs_only": 1, "neither": 0}  # fmt: skip
    assert "p only 1" in turns_table(runs, [pair])


def test_a_session_completes_at_its_last_token_and_a_failed_one_is_left_out() -> None:
    def rec(session: str, sent: float, e2e: float, error: str = "") -> dict:
        return {"session": session, "sent_s": sent, "e2e_s": e2e, "error": error}

    records = [rec("a", 1.0, 2.0), rec("a", 10.0, 0.5), rec("b", 0.0, 4.0),
               rec("c", 0.0, 1.0), rec("c", 5.0, 0.0, error="status 500")]  # fmt: skip
    assert mean_jct_s(records) == pytest.approx((9.5 + 4.0) / 2)
    assert mean_jct_s([]) is None


def test_a_regime_sets_the_workload_and_an_option_given_overrides_it() -> None:
    args = ["--server", "x=http://127.0.0.1:1", "--regime", "idle", "--sessions", "3"]
    cfg = config_from(parse(args))
    assert (cfg.regime, cfg.sessions, cfg.time_divisor, cfg.max_gap_s) == ("idle", 3, 0.5, 60.0)
    assert cfg.window_tokens == REGIMES["busy"]["window_tokens"] == 4000


def test_capacity_is_read_from_vllm_metrics_or_its_log(tmp_path: Path) -> None:
    text = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",'
        'num_gpu_blocks="96",num_cpu_blocks="None"} 1.0\n'
    )
    assert vllm_metrics_capacity(text) == {
        "tokens": 1536, "block_tokens": 16, "blocks": 96,
        "source": "/metrics vllm:cache_config_info",
    }  # fmt: skip
    assert vllm_metrics_capacity("penelope_pages 3\n") is None
    log = tmp_path / "vllm.log"
    log.write_text("INFO ... GPU KV cache size: 12,288 tokens\n")
    assert log_capacity(log)["tokens"] == 12288
    assert log_capacity(None)["tokens"] is None
    log.write_text(
        "0.00.264 I llama_kv_cache: size =  275.62 MiB ( 12544 cells,  30 layers,  4/1 seqs), "
        "K (f16):  137.81 MiB, V (f16):  137.81 MiB\n"
    )
    assert log_capacity(log) == {
        "tokens": 12544, "blocks": None, "source": "log: llama_kv_cache cells"
    }  # fmt: skip


def tiny_workload(tmp_path: Path, window: int, raw_tokens: int) -> list[str]:
    """Two 2-turn sessions, 2 output tokens, starts and gaps well under a second."""
    return [
        "--sessions", "2", "--max-turns", "2", "--max-output-tokens", "2",
        "--window-tokens", str(window), "--mean-interarrival-s", "0.2", "--max-gap-s", "0.3",
        "--raw-prompt-tokens", str(raw_tokens), "--raw-repeats", "1",
        "--startup-timeout-s", "120", "--out-dir", str(tmp_path),
    ]  # fmt: skip


@pytest.mark.timeout(300)
def test_a_replay_against_two_penelope_servers_writes_every_figure(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    plan = make_plan(SMALL, 0)
    kv = 1024
    args = [
        "--server", f"shipped=http://127.0.0.1:{ports[0]}",
        "--server", f"lru=http://127.0.0.1:{ports[1]}",
        "--start", f"shipped={serve_cmd('penelope')}",
        "--start", f"lru={serve_cmd('lru')}",
        "--kv-tokens", str(kv), "--seeds", "0",
        "--sessions", "3", "--max-turns", "3", "--max-output-tokens", "2",
        "--window-tokens", "768", "--mean-interarrival-s", "0.2", "--max-gap-s", "0.3",
        "--raw-prompt-tokens", "256", "--raw-repeats", "1",
        "--startup-timeout-s", "120", "--out-dir", str(tmp_path),
    ]  # fmt: skip
    assert main(args) == 0
    doc = json.loads((tmp_path / "versus.json").read_text())
    assert (tmp_path / "versus.png").stat().st_size > 0
    assert doc["cpu"]["model"] and doc["baseline"] == "lru"
    assert [r["server"] for r in doc["runs"]] == ["shipped", "lru"]
    for run in doc["runs"]:
        assert run["cold_start"] and run["kv_capacity"]["tokens"] == kv
        assert run["kv_capacity"]["block_tokens"] == 16
        recs = run["records"]
        assert len(recs) == plan.requests and not any(r["error"] for r in recs)
        for r in recs:
            assert 0 < r["ttft_s"] <= r["e2e_s"]
            assert r["prompt_tokens"] == r["prompt_len"] and r["completion_tokens"] == 2
        later = [r for r in recs if r["turn"] > 0]
        assert later and sum(r["cached_tokens"] for r in later) > 0  # the cache was used
        s = run["summary"]
        assert s["errors"] == 0 and s["requests"] == plan.requests
        assert s["p50_ttft_s"] <= s["p90_ttft_s"] and 0 < s["hit_ratio"] < 1
        assert s["hit_ratio"] == pytest.approx(
            sum(r["cached_tokens"] for r in recs) / sum(r["prompt_tokens"] for r in recs)
        )
        assert run["raw_prefill"]["ttft_s"] > 0
    # every returning turn: Penelope's ledger says why it computed what it did
    for run in doc["runs"]:
        t, later = run["turns"], [r for r in run["records"] if r["turn"] > 0]
        assert t["returning_turns"] == len(later) and t["first_turns"] == plan.requests - len(later)
        computed = sum(r["prompt_tokens"] - r["cached_tokens"] for r in later)
        assert sum(t["returning_miss_tokens"].values()) == computed
    (pair,) = doc["turns"]
    assert (pair["server"], pair["baseline"]) == ("shipped", "lru")
    assert sum(pair[k] for k in ("both", "ours_only", "theirs_only", "neither")) == len(later)
    (ratio,) = doc["ratios"]
    shipped, lru = (r["summary"] for r in doc["runs"])
    assert ratio["mean_ttft_s"] == pytest.approx(shipped["mean_ttft_s"] / lru["mean_ttft_s"])
    assert set(doc["raw_prefill_ttft_s"]) == {"shipped", "lru"}

    # the simulator on the same workload: one row per (capacity, seed), the measured ratio
    cost = CpuCostModel(0.002, 2e-4, 1e-8, 1e-4, kv_bytes_per_token=4096, c_row=1e-3)
    (row,) = predict(doc, cost, "shipped", "lru", ("oracle", "lru"))
    assert row["kv_tokens"] == kv and row["sim_ratio"] > 0
    ablation = row["sim_ratio_by_policy"]
    assert set(ablation) == {"oracle", "lru"} and all(v > 0 for v in ablation.values())
    assert row["measured_ratio"] == pytest.approx(ratio["mean_ttft_s"])
    assert row["error"] == pytest.approx(row["sim_ratio"] / row["measured_ratio"] - 1)
    assert set(row["sim_ablation"]) == {
        "cuda schedule", "equal raw speed", "cuda schedule, equal raw speed"}  # fmt: skip
    assert row["sim_ratios"]["mean_ttft"] == row["sim_ratio"]
    measured, extra = predict(doc, cost, "shipped", "lru", seeds=(1,))
    assert measured["sim_ratio"] == row["sim_ratio"]  # the simulator is deterministic
    assert extra["seed"] == 1 and extra["measured_ratio"] is None and extra["sim_ratio"] > 0


def test_a_server_that_does_not_come_up_is_recorded_and_the_sweep_goes_on(
    tmp_path: Path,
) -> None:
    """vLLM refuses a pool smaller than its max model length at start-up: that cell is
    recorded with the log's root cause, the other capacities still run, and the exit
    code says a cell is missing."""
    port = free_port()
    refuse_small = (
        "if [ {kv_tokens} -lt 700 ]; then echo 'ValueError: the pool is too small'; exit 3; fi; "
        f"{serve_cmd('lru')}"
    )
    args = [
        "--server", f"x=http://127.0.0.1:{port}", "--start", f"x={refuse_small}",
        "--kv-tokens", "640,1024", "--seeds", "0", *tiny_workload(tmp_path, 600, 64),
    ]  # fmt: skip
    assert main(args) == 1
    doc = json.loads((tmp_path / "versus.json").read_text())
    (failed,) = doc["failed"]
    assert (failed["server"], failed["kv_tokens"], failed["seed"]) == ("x", 640, 0)
    assert "ValueError: the pool is too small" in failed["error"].splitlines()[0]
    assert failed["error"].startswith("StartFailed: server x did not come up")
    (run,) = doc["runs"]
    assert run["kv_tokens"] == 1024 and run["summary"]["errors"] == 0
    assert len(run["load_avg"]["before"]) == 3


def test_a_port_someone_else_holds_is_refused_before_the_start(tmp_path: Path) -> None:
    """Another process on the server's port would answer /health for it: the start is
    refused, and the command never runs."""
    import socket

    from bench.versus.servers import StartFailed, running

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        marker = tmp_path / "ran"
        spec = ServerSpec("x", f"http://127.0.0.1:{port}", start=f"touch {marker}")
        with pytest.raises(StartFailed, match="another process listens"):
            with running(spec, 1024, 16, tmp_path / "x.log", 5.0):
                pass
        assert not marker.exists()


def test_a_load_scales_starts_and_gaps_to_that_share_of_the_service_rate() -> None:
    from bench.versus.load import offered_tokens, scaled, span_s, time_factor, turn_work

    plan = make_plan(SMALL, 0)
    for s in plan.sessions:
        work = turn_work(s)
        assert work[0] == len(s.turns[0].prompt)  # a first turn prefills its whole prompt
        assert all(0 < w < len(t.prompt) for w, t in zip(work[1:], s.turns[1:]))  # past the last
    rate = 500.0
    for load in (0.5, 0.9, 1.2):
        factor = time_factor(plan, load, rate)
        busy = scaled(plan, factor)
        assert offered_tokens(busy) == offered_tokens(plan)  # the same work, other times
        assert offered_tokens(busy) / span_s(busy) == pytest.approx(load * rate)
        for a, b in zip(plan.sessions, busy.sessions):
            assert b.start_s == pytest.approx(a.start_s * factor)
            assert [t.gap_s for t in b.turns] == pytest.approx([t.gap_s * factor for t in a.turns])
            assert [t.prompt for t in b.turns] == [t.prompt for t in a.turns]
    assert time_factor(plan, 1.2, rate) < time_factor(plan, 0.5, rate)  # more load: less time
    with pytest.raises(ValueError, match="positive"):
        time_factor(plan, 0.0, rate)


def test_a_replay_at_a_load_times_the_service_rate_first(tmp_path: Path) -> None:
    port = free_port()
    args = [
        "--server", f"shipped=http://127.0.0.1:{port}",
        "--start", f"shipped={serve_cmd('penelope')}",
        "--kv-tokens", "1024", "--seeds", "0", "--load", "0.5",
        *tiny_workload(tmp_path, 768, 128),
    ]  # fmt: skip
    assert main(args) == 0
    doc = json.loads((tmp_path / "versus.json").read_text())
    (run,) = doc["runs"]
    rate = run["service_rate"]
    assert rate["source"] == "timed" and rate["fastest"] == "shipped" and rate["tok_s"] > 0
    assert run["load"] == 0.5 and run["time_factor"] > 0
    assert (tmp_path / "logs" / "shipped-service-rate.log").exists()
    (row,) = doc["rows"]
    assert row["load"] == 0.5 and row["errors"] == 0
    with pytest.raises(ValueError, match="loads must be positive"):
        VersusConfig((ServerSpec("a", "http://127.0.0.1:1"),), loads=(0.0,))
