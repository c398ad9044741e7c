"""`bench versus --peers`: the peers as their users run them, started by the project's scripts,
with Penelope as it ships beside them; each run records what it ran."""

from __future__ import annotations

import pytest

from bench.versus.cli import config_from, parse
from bench.versus.config import MAX_POSITIONS, ServerSpec
from bench.versus.peers import VERSUS_PEERS, native_bf16
from penelope_engine.errors import UnknownNameError


def _servers(*argv: str) -> dict[str, ServerSpec]:
    cfg = config_from(parse(["--kv-tokens", "12416", "--block-tokens", "32", *argv]))
    return {s.name: s for s in cfg.servers}


def test_peers_start_with_penelope_as_it_ships_at_the_runs_capacity() -> None:
    servers = _servers("--peers", "vllm,llama,llama-default,llama-q8_0")
    assert list(servers) == ["penelope", "vllm", "llama", "llama-default", "llama-q8_0"]
    assert len({s.url for s in servers.values()}) == 5  # a port each
    pen = servers["penelope"].command(12416, 32)
    assert "penelope serve" in pen and "--dtype float32" in pen
    assert "--device-pages 388 --host-pages 0 --store-uri none" in pen
    llama = servers["llama"].command(12416, 32)
    assert "LLAMA_CTX=12416" in llama and "LLAMA_CACHE_RAM=0" in llama and " run f32 " in llama
    assert "LLAMA_CACHE_RAM=8192" in servers["llama-default"].command(12416, 32)
    assert " run q8_0 " in servers["llama-q8_0"].command(12416, 32)
    assert all(s.start.startswith("cd ") for s in servers.values())  # from the repository root


def test_vllm_runs_bf16_at_equal_bytes_where_the_cpu_has_native_bf16() -> None:
    vllm = _servers("--peers", "vllm")["vllm"].command(12416, 32)
    if native_bf16():
        assert "serve bfloat16" in vllm and "--num-gpu-blocks-override 776" in vllm
    else:
        assert "serve float32" in vllm and "--num-gpu-blocks-override 388" in vllm
    f32 = _servers("--peers", "vllm-float32")["vllm-float32"].command(1024, 32)
    assert "serve float32" in f32 and "--block-size 32" in f32
    assert "--num-gpu-blocks-override 32 --max-model-len 992" in f32  # the capacity caps it
    assert f"--max-model-len {MAX_POSITIONS}" in _servers("--peers", "vllm-float32")[
        "vllm-float32"
    ].command(100_000, 32)
    with pytest.raises(ValueError, match="vllm takes KV blocks of a multiple of 32 tokens"):
        config_from(parse(["--peers", "vllm", "--block-tokens", "16"]))


def test_a_given_penelope_server_replaces_the_started_one_and_names_are_checked() -> None:
    servers = _servers(
        "--server", "penelope=http://127.0.0.1:9", "--start", "penelope=my-penelope {port}",
        "--peers", "llama,llama",
    )  # fmt: skip
    assert list(servers) == ["penelope", "llama"]
    assert servers["penelope"].command(1024, 16) == "my-penelope 9"
    with pytest.raises(UnknownNameError, match="unknown versus peer 'sglang'; valid: penelope"):
        _servers("--peers", "sglang")
    with pytest.raises(SystemExit, match="name the servers"):
        _servers()
    with pytest.raises(ValueError, match="kv_factor must be positive"):
        ServerSpec("x", "http://x", kv_factor=0)
    assert set(VERSUS_PEERS) >= {"penelope", "vllm", "llama", "llama-default", "llama-q8_0"}


def _row(server: str, load: float, ttft: float, p90: float, jct: float, hit: float) -> dict:
    figures = {"mean_ttft_s": ttft, "p90_ttft_s": p90, "mean_jct_s": jct, "hit_ratio": hit}
    return {"kv_tokens": 12416, "load": load, "server": server, "seeds": 3, "errors": 0.0,
            **figures}  # fmt: skip


def test_targets_are_held_against_the_best_peer_at_each_load() -> None:
    from bench.versus import targets

    rows = [
        _row("penelope", 0.5, 4.0, 9.0, 100.0, 0.6),
        _row("vllm", 0.5, 9.0, 16.0, 200.0, 0.2),
        _row("llama", 0.5, 8.0, 30.0, 130.0, 0.3),  # the best mean TTFT and JCT, not p90
        _row("penelope", 1.2, 9.5, 20.0, 300.0, 0.5),
        _row("vllm", 1.2, 10.0, 30.0, 300.0, 0.55),
    ]
    half, over = targets.check(rows)
    assert [(f["figure"], f["best_peer"]) for f in half["figures"]] == [
        ("mean_ttft_s", "llama"), ("p90_ttft_s", "vllm"), ("mean_jct_s", "llama")
    ]  # fmt: skip
    assert [f["ratio"] for f in half["figures"]] == pytest.approx([0.5, 9 / 16, 100 / 130])
    assert half["met"] and half["cached_share_met"]
    assert over["figures"][0]["ratio"] == pytest.approx(0.95) and not over["figures"][0]["met"]
    assert not over["cached_share_met"] and not over["met"]  # 0.5 < vLLM's 0.55
    table = targets.table([half, over])
    assert "met" in table.splitlines()[1] and table.splitlines()[2].endswith("MISSED")
    errored = [dict(r, errors=1.0) if r["server"] == "vllm" else r for r in rows[:3]]
    assert not targets.check(errored)[0]["met"]  # an error anywhere fails the cell
