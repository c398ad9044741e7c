"""`penelope bench export-trace`: the sessions survive aiperf's own loader (run in aiperf's
venv): session by session, turn by turn, timing and lengths as exported, and a returning
turn's prompt starts with every full block of the turn before it; aiperf analyze-trace
finds our cache-hit rate. The rows' rules are checked on a hand-made plan first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.aiperf import env
from bench.aiperf.export import BlockIds, ExportConfig, request_rows, session_rows
from bench.aiperf.export_cli import analyze, config_from, export
from bench.aiperf.tokenizer import hub_cache, hub_env
from bench.versus.plan import Plan, PlannedSession, PlannedTurn
from bench.workload import Workload

ROUNDTRIP = (Path(__file__).with_name("roundtrip.py")).read_text()
SMALL = ["--sessions", "5", "--max-turns", "4", "--length-divisor", "64", "--window-tokens",
         "2000", "--max-output-tokens", "4", "--max-gap-s", "2"]  # fmt: skip


def _plan(*sessions: PlannedSession) -> Plan:
    return Plan(0, sessions, Workload((), (), {}, None, {}), 0, 0)  # type: ignore[arg-type]


def _turn(gap: float, prompt: range | list[int], out: int = 2) -> PlannedTurn:
    return PlannedTurn(gap, tuple(prompt), out)


def test_a_returning_turn_reuses_the_blocks_of_the_turn_before() -> None:
    a = PlannedSession("a", 1.0, (_turn(0, range(10)), _turn(3, range(17)),
                                  _turn(2, [0, 1, 2, 3, 99, 98, 97, 96, 95])))  # fmt: skip
    b = PlannedSession("b", 2.5, (_turn(0, [*range(8), 50]),))
    ids = BlockIds(4)
    rows = request_rows(_plan(a, b), ids)
    req = {(r["extra"]["session_id"], r["timestamp"]): r["hash_ids"] for r in rows}
    t0, t1, t2 = req[("a", 1000.0)], req[("a", 4000.0)], req[("a", 6000.0)]
    assert t1[:2] == t0[:2] and len(t1) == 5  # 4 full blocks of 17 tokens, then the tail
    assert t2[0] == t0[0] and t2[1] not in t0  # diverges inside block 1
    assert req[("b", 2500.0)][:2] == t0[:2]  # another session's equal content: equal ids
    rows = list(session_rows(_plan(a, b), BlockIds(4)))
    assert [r["session_id"] for r in rows] == ["a", "a", "a@2", "b"]
    assert rows[0]["timestamp"] == 1000.0 and rows[1]["delay"] == 3000.0
    assert rows[1]["input_length"] == 17 - 10 - 2 and len(rows[1]["hash_ids"]) == 2
    assert rows[2]["timestamp"] == 6000.0 and rows[2]["input_length"] == 9
    assert all(r["extra"]["session_id"] in ("a", "b") for r in rows)


def test_the_export_config_refuses_a_block_of_no_tokens() -> None:
    with pytest.raises(ValueError, match="block"):
        ExportConfig(config_from(SMALL)[0].workload, block=0)


def _aiperf_read(path: Path, hf_home: Path, block: int) -> list[dict[str, Any]]:
    out = env.run_python(ROUNDTRIP, [str(path), hub_cache(hf_home), str(block)], 300,
                         hub_env(hf_home))  # fmt: skip
    return list(json.loads(out))


@pytest.mark.slow
def test_aiperfs_loader_reads_the_sessions_as_exported(aiperf_python: Path, tmp_path: Path) -> None:
    cfg, _ = config_from([*SMALL, "--out-dir", str(tmp_path), "--block", "32"])
    export(cfg)
    rows = [json.loads(x) for x in (tmp_path / "sessions.jsonl").read_text().splitlines()]
    convs = _aiperf_read(tmp_path / "sessions.jsonl", tmp_path / "hf", 32)
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_id.setdefault(r["session_id"], []).append(r)
    assert [c["session_id"] for c in convs] == list(by_id) and len(by_id) >= 3
    for c in convs:
        mine = by_id[c["session_id"]]
        assert [len(t["tokens"]) for t in c["turns"]] == [r["input_length"] for r in mine]
        assert [t["max_tokens"] for t in c["turns"]] == [r["output_length"] for r in mine]
        assert c["turns"][0]["timestamp"] == mine[0]["timestamp"]
        assert [t["delay"] for t in c["turns"][1:]] == [r["delay"] for r in mine[1:]]
        assert {t["extra"]["session_id"] for t in c["turns"]} == {c["session_id"].split("@")[0]}
    assert any(len(c["turns"]) > 1 for c in convs)  # there are returning turns


@pytest.mark.slow
def test_aiperfs_prompts_keep_each_returning_turns_prefix(
    aiperf_python: Path, tmp_path: Path
) -> None:
    cfg, _ = config_from([*SMALL, "--out-dir", str(tmp_path), "--block", "32"])
    doc = export(cfg)
    rows = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    convs = _aiperf_read(tmp_path / "requests.jsonl", tmp_path / "hf", 32)
    assert len(convs) == len(rows)
    last: dict[str, tuple[list[int], list[int]]] = {}
    returning = 0
    for r, c in zip(rows, convs):
        (turn,) = c["turns"]
        sid, toks = turn["extra"]["session_id"], turn["tokens"]
        assert len(toks) == r["input_length"]
        if sid in last:
            prev_ids, prev_toks = last[sid]
            full = len(prev_toks) // 32
            if r["hash_ids"][:full] == prev_ids[:full]:  # the trace extends the turn before
                returning += 1
                assert toks[: full * 32] == prev_toks[: full * 32]
        last[sid] = (r["hash_ids"], toks)
    assert returning >= 3
    theirs = analyze(tmp_path / "requests.jsonl", 32, tmp_path / "analysis.json")
    assert theirs["total_requests"] == doc["ours"]["requests"]
    assert theirs["cache_hit_rate"] == pytest.approx(doc["ours"]["cache_hit_rate"])
    assert doc["ours"]["cache_hit_rate"] > 0.3
