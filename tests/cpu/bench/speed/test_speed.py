"""`penelope bench speed` against our own server as the other side: the schema, sane
figures, the session's cache hits; and the pieces (CPU clock, decode window, ratios)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

import pytest

from bench.speed.cli import main, run_speed
from bench.speed.client import Stream
from bench.speed.config import SpeedConfig
from bench.speed.cpu import CpuClock, tree_cpu_s
from bench.speed.measure import Side, decode_window, prefill
from bench.speed.report import figure_keys, ratios
from bench.speed.server import penelope_server

CFG = SpeedConfig(
    model="tiny-qwen3",
    prompt_tokens=96,
    decode_prompt_tokens=16,
    decode_tokens=32,
    batch=8,
    turns=3,
    shared_tokens=48,
    turn_tokens=16,
    turn_max_tokens=2,
    repeats=1,
    device_pages=256,
    page_size=16,
)
KEYS = [
    "prefill_tok_s", "ttft_2k_s", "decode_b1_tok_s", "decode_b8_tok_s",
    "prefill_tok_s_per_cpu_s", "ttft_2k_s_per_cpu_s",
    "decode_b1_tok_s_per_cpu_s", "decode_b8_tok_s_per_cpu_s",
]  # fmt: skip


@pytest.mark.timeout(600)
def test_a_run_against_our_own_server_has_every_figure_and_its_ratios() -> None:
    with penelope_server(CFG) as other:
        cfg = dataclasses.replace(CFG, against=other.url, against_pid=other.pid, repeats=2)
        result = run_speed(cfg)
    assert sorted(figure_keys(8)) == sorted(KEYS)
    for side in ("ours", "theirs"):
        figures = result[side]
        assert all(figures[k] > 0 and math.isfinite(figures[k]) for k in KEYS)
        for run in result["runs"][side]:
            assert run["ttft_2k_s"] == pytest.approx(96 / run["prefill_tok_s"])
        turns = figures["session"]
        assert [t["turn"] for t in turns] == [1, 2, 3]
        assert turns[0]["cached_tokens"] == 0
        # each later turn finds the earlier prompt's full pages
        for prev, turn in zip(turns, turns[1:]):
            assert turn["cached_tokens"] == prev["prompt_tokens"] // 16 * 16
        assert len(result["runs"][side]) == 2
    assert result["ratios"] == ratios(result["ours"], result["theirs"], 8)
    assert set(result["ratios"]) == set(KEYS)
    assert all(r > 0 and math.isfinite(r) for r in result["ratios"].values())


def test_ours_alone_writes_json_without_a_peer(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "speed.json"
    args = ["--model", "tiny-qwen3", "--prompt-tokens", "64", "--decode-tokens", "24",
            "--batch", "2", "--turns", "2", "--shared-tokens", "32", "--turn-tokens", "16",
            "--turn-max-tokens", "1", "--repeats", "1", "--device-pages", "128",
            "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    result = json.loads(out.read_text())
    assert result["theirs"] is None and result["ratios"] is None
    assert result["ours"]["decode_b2_tok_s_per_cpu_s"] > 0
    assert "prefill_tok_s" in capsys.readouterr().out


def test_the_cpu_clock_charges_a_busy_window_and_not_an_idle_one() -> None:
    with CpuClock(os.getpid(), period_s=0.02) as clock:
        t0, c0 = time.monotonic(), time.process_time()
        while time.process_time() - c0 < 0.4:
            pass  # busy for 0.4 CPU-seconds, however long a loaded machine makes that
        time.sleep(0.1)  # the sampler's last busy sample lands
        t1 = time.monotonic()
        time.sleep(0.5)
        t2 = time.monotonic()
        busy, idle = clock.between(t0, t1), clock.between(t1 + 0.05, t2)
    assert busy > 0.25 and idle < 0.1
    assert tree_cpu_s(os.getpid()) >= clock.cpu[-1]


def test_the_decode_window_counts_tokens_while_every_stream_decodes() -> None:
    a = Stream(sent=0.0, chunk_times=[1.0, 2.0, 3.0, 4.0])
    b = Stream(sent=0.0, chunk_times=[1.5, 2.5, 3.5])
    assert decode_window([a, b]) == (1.5, 3.5, 4)  # a: 2.0, 3.0; b: 2.5, 3.5
    with pytest.raises(RuntimeError):
        decode_window([Stream(0.0, [1.0]), Stream(0.0, [2.0])])


def test_ratios_are_above_one_when_we_are_ahead_ttft_included() -> None:
    ours = {k: 2.0 for k in KEYS} | {"ttft_2k_s": 1.0, "ttft_2k_s_per_cpu_s": 1.0}
    theirs = {k: 1.0 for k in KEYS} | {"ttft_2k_s": 2.0, "ttft_2k_s_per_cpu_s": 2.0}
    assert all(r == 2.0 for r in ratios(ours, theirs, 8).values())


def test_a_prefill_the_server_had_cached_is_refused(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # a peer that outlives one bench serves the next bench's same-seed prompts from its cache
    cached = Stream(sent=0.0, chunk_times=[0.1], cached_tokens=64)
    monkeypatch.setattr("bench.speed.measure.complete", lambda *a, **k: cached)
    side = Side("theirs", "http://127.0.0.1:1", "m", CpuClock(os.getpid()))
    with pytest.raises(RuntimeError, match="another --seed"):
        prefill(side, CFG, 0)


def test_the_grammar_s_cost_is_timed_on_steps_where_the_whole_batch_decodes() -> None:
    from bench.speed.constrained import constrained_step_cost

    cost = constrained_step_cost(dataclasses.replace(CFG, batch=3, constrained_steps=6, repeats=2))
    # no row can close the grammar early: both sides time the same steps
    assert cost["steps"]["plain"] == cost["steps"]["constrained"] >= 2 * 5
    assert cost["plain_step_ms"] > 0 and cost["constrained_step_ms"] > 0
    assert cost["ratio"] == pytest.approx(cost["constrained_step_ms"] / cost["plain_step_ms"], 0.01)
