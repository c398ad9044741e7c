"""`penelope bench agree`: the engine and the simulator run one scheduling core."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bench.sim import agree
from penelope_cli.cli import main

pytestmark = pytest.mark.slow


def test_the_engine_and_the_simulator_agree_on_every_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "agree", "--json"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert r["ok"] and r["mismatches"] == 0 and r["mismatches_fast_decode"] == 0
    assert r["exercised_every_tier"]
    assert r["copies_agree"] and r["copies_stalled_steps"]
    store, host_only = r["cases"]
    assert store["totals"]["engine"]["store_tokens"] > 0
    assert host_only["totals"]["engine"]["recomputed_tokens"] > 0
    for case in r["cases"]:
        assert case["requests"] >= 20
        assert case["totals"]["engine"] == case["totals"]["sim"] == case["totals"]["sim_fast"]
        engine = case["copies"]["engine"]
        assert engine["d2h_pages"] > 0 and engine["h2d_pages"] > 0 and engine["step_copy_s"] > 0
    assert store["copies"]["engine"]["spill_pages"] > 0  # host evictions went to the store


def test_a_different_cache_on_one_side_is_seen_as_mismatches() -> None:
    cfg = agree.AgreeConfig(sessions=6, turns=3)
    wl = agree.workload(cfg)
    vocab, kv = 151669, 4096
    ours, _, copied = agree.run_sim(cfg, wl, vocab, kv, store=False, fast=False)
    tighter = replace(cfg, device_pages=cfg.device_pages // 2)
    theirs, _, copied_tighter = agree.run_sim(tighter, wl, vocab, kv, store=False, fast=False)
    diffs = agree.compare(ours, theirs)
    assert diffs and any("device_tokens" in d for d in diffs)
    assert agree.compare(ours, ours) == []
    assert not agree.copies_agree(copied, copied_tighter)  # other copies are seen too
