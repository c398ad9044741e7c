"""`penelope bench speed --peers`: peers by name from the project's scripts, checked at
construction; one that cannot start fails the bench with its script's own reason; the table
puts every side's figures and our ratio to each side by side."""

from __future__ import annotations

import dataclasses

import pytest

from bench.child import StartFailed
from bench.speed.config import SpeedConfig
from bench.speed.peers import SPEED_PEERS
from bench.speed.report import figure_keys, table
from bench.speed.server import started_peers
from penelope_engine.errors import UnknownNameError


def test_peers_are_checked_by_name_once_each() -> None:
    assert set(SPEED_PEERS.names()) == {"llama-f32", "llama-q8_0", "vllm-float32", "vllm-bfloat16"}
    with pytest.raises(UnknownNameError, match="llama-q8_0"):
        SpeedConfig(peers=("llama-q4",))
    with pytest.raises(ValueError, match="each peer once"):
        SpeedConfig(peers=("llama-f32", "llama-f32"))
    with pytest.raises(ValueError, match="go together"):
        SpeedConfig(against="http://127.0.0.1:1")


def test_a_peer_command_names_its_port_slots_and_weights() -> None:
    llama = SPEED_PEERS.get("llama-q8_0").shell(8123, 8)
    assert "LLAMA_SLOTS=8" in llama and "run q8_0 8123" in llama and "LLAMA_THREADS=1" in llama
    vllm = SPEED_PEERS.get("vllm-bfloat16").shell(8124, 8)
    assert "VLLM_PORT=8124" in vllm and vllm.endswith("serve bfloat16")


def test_a_peer_that_is_not_built_fails_with_its_scripts_reason(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("LLAMA_DIR", str(tmp_path))  # an empty llama.cpp directory
    cfg = SpeedConfig(peers=("llama-f32",), startup_timeout_s=60.0)
    with pytest.raises(StartFailed, match="missing; run"):
        with started_peers(cfg):
            pass


def _figures(value: float, batch: int) -> dict:
    session = [{"turn": 1, "prompt_tokens": 10, "ttft_s": 0.5, "ttft_cpu_s": 0.5,
                "cached_tokens": 0}]  # fmt: skip
    return {k: value for k in figure_keys(batch)} | {"session": session}


def test_the_table_has_a_column_per_side_and_a_ratio_per_peer() -> None:
    cfg = SpeedConfig(peers=("llama-q8_0", "vllm-bfloat16"), constrained_steps=0)
    result = {
        "config": dataclasses.asdict(cfg),
        "ours": _figures(2.0, 8),
        "theirs": None,
        "peers": {"llama-q8_0": _figures(1.0, 8), "vllm-bfloat16": _figures(4.0, 8)},
        "peer_ratios": {
            "llama-q8_0": {k: 2.0 for k in figure_keys(8)},
            "vllm-bfloat16": {k: 0.5 for k in figure_keys(8)},
        },
    }
    lines = table(result).splitlines()
    header = lines[0].split()
    assert header == ["figure", "ours", "llama-q8_0", "vllm-bfloat16", "ours/llama-q8_0",
                      "ours/vllm-bfloat16"]  # fmt: skip
    prefill = next(line.split() for line in lines if line.startswith("prefill_tok_s "))
    assert prefill == ["prefill_tok_s", "2.0", "1.0", "4.0", "2.0", "0.5"]
