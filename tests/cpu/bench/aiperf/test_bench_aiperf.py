"""`penelope bench aiperf`, CI-sized: each workload (a few of our exported sessions, or a
few of aiperf's synthesised ones, short) against `penelope serve` started by the bench,
0 errors, every figure read back from aiperf's own JSON. Then the figures' reading and
the ratios on hand-made documents, and the synthesis scale-down on aiperf's defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.aiperf.cli import main
from bench.aiperf.profile import ProfileSpec, profile_args, summary
from bench.aiperf.report import ratios, table
from bench.aiperf.synth import SynthConfig, scaled_config

CI_SIZED = ["--peer", "penelope", "--sessions", "4", "--max-turns", "2", "--length-divisor",
            "64", "--window-tokens", "1500", "--max-output-tokens", "4", "--max-gap-s", "0.5",
            "--mean-interarrival-s", "0.3", "--block", "32", "--synth-sessions", "2",
            "--synth-max-turns", "2", "--kv-tokens", "8192", "--timeout-s", "150",
            "--startup-timeout-s", "120"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(360)  # the server's start (120 s) and aiperf's run (150 s) have their own
@pytest.mark.parametrize("workload", ["exported", "synth"])
def test_each_workload_completes_against_penelope_with_no_error(
    aiperf_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], workload: str
) -> None:
    assert main([*CI_SIZED, "--workload", workload, "--out-dir", str(tmp_path)]) == 0
    print(capsys.readouterr().out)  # the table, for the log
    doc = json.loads((tmp_path / "aiperf.json").read_text())
    (r,) = doc["runs"]
    assert (r["workload"], r["server"]) == (workload, "penelope")
    assert r["errors"] == 0 and not r["cancelled"] and r["aiperf_version"] == "0.13.0"
    assert r["requests"] >= 4 and r["ttft_p50_ms"] > 0 and r["output_tok_s"] > 0
    assert "--streaming" in r["command"] and "ignore_eos:true" in r["command"]
    assert r["command"][r["command"].index("--session-header") + 1] == "x-session-id"
    if workload == "exported":  # every planned turn was sent
        exported = json.loads((tmp_path / "exported" / "export.json").read_text())
        assert r["requests"] == exported["plan"]["requests"]
    else:  # 2 sessions x their first 2 turns
        assert r["requests"] == 4


def _doc(ttft: float, errors: int = 0) -> dict:
    stat = {"avg": ttft, "p50": ttft, "p90": 2 * ttft, "p99": 3 * ttft}
    return {"aiperf_version": "0.13.0", "time_to_first_token": stat, "request_latency": stat,
            "inter_token_latency": {"avg": 5.0, "p50": 4.0}, "request_count": {"avg": 8},
            "output_token_throughput": {"avg": 100.0 / ttft}, "request_throughput": {"avg": 1.0},
            "usage_prompt_tokens": {"sum": 1000}, "usage_prompt_cache_read_tokens": {"sum": 250},
            "error_summary": [{"error_details": {}, "count": errors}] if errors else [],
            }  # fmt: skip


def test_the_figures_and_the_ratios_read_aiperfs_json() -> None:
    ours, theirs = summary(_doc(100.0)), summary(_doc(400.0, errors=2))
    assert ours["ttft_p90_ms"] == 200.0 and ours["cached_share"] == 0.25
    assert ours["errors"] == 0 and theirs["errors"] == 2
    runs = [{"workload": "w", "server": "penelope", **ours},
            {"workload": "w", "server": "vllm", **theirs}]  # fmt: skip
    (r,) = ratios(runs, "vllm")
    assert r["server"] == "penelope" and r["ttft_avg_ms"] == pytest.approx(0.25)
    assert r["output_tok_s"] == pytest.approx(4.0)
    assert "0.25x" in table(runs, [r]) and "vllm" in table(runs, [r])


def test_a_profile_spec_refuses_what_aiperf_would_fail_on(tmp_path: Path) -> None:
    ok = dict(url="http://127.0.0.1:1", model="m", input_file=tmp_path, block=16,
              artifact_dir=tmp_path, hf_home=tmp_path)  # fmt: skip
    assert "--fixed-schedule" in profile_args(ProfileSpec(**ok), "tok")  # type: ignore[arg-type]
    for bad in ({"url": "127.0.0.1:1"}, {"block": 0}, {"endpoint": "embeddings"}):
        with pytest.raises(ValueError):
            ProfileSpec(**{**ok, **bad})  # type: ignore[arg-type]


def test_the_synthesis_keeps_aiperfs_shape_at_a_cpus_scale() -> None:
    default = {"new_tokens_per_turn": {"mean": 6000, "median": 6000, "max": 10000, "bias": 1.1},
               "generation_length": {"mean": 1000, "median": 1000, "max": 1500},
               "inter_turn_delay": {"agentic_fraction": 0.7,
                                    "agentic_delay": {"mean": 2500, "median": 1800, "max": 10000},
                                    "human_delay": {"mean": 40000, "median": 25000, "max": 120000},
                                    "max": None},
               "reset": {"base_probability": 0.01, "context_scaling": 1.5},
               "max_prompt_tokens": 167000, "block_size": 512,
               "cache": {"layer1_tokens": 32000, "layer1_5_tokens": 0,
                         "layer2": {"mean": 15000, "median": 5000, "max": 30000},
                         "layer1_5_groups": {"num_groups": 1, "zipf_alpha": 0.6}}}  # fmt: skip
    d = scaled_config(default, SynthConfig())
    assert d["new_tokens_per_turn"] == {"mean": 188, "median": 188, "max": 312, "bias": 1.1}
    assert d["cache"]["layer1_tokens"] == 1000 and d["block_size"] == 16
    assert d["inter_turn_delay"]["human_delay"]["mean"] == 10000
    assert d["max_prompt_tokens"] == 4000 and d["reset"] == default["reset"]
    assert default["block_size"] == 512  # the input is left as it was
    with pytest.raises(ValueError):
        SynthConfig(sessions=0)


def test_peers_get_a_free_port_and_their_launchers_command() -> None:
    from bench.aiperf.cli import build_parser, servers

    args = build_parser().parse_args(["--peer", "penelope", "--peer", "llama-f32",
                                      "--server", "x=http://127.0.0.1:9"])  # fmt: skip
    x, pen, llama = servers(args)
    assert (x.name, x.start) == ("x", "")
    port = pen.url.rsplit(":", 1)[1]
    assert f"--port {port}" in pen.command(8192, 16) and "--device-pages 512" in pen.command(
        8192, 16
    )
    assert llama.command(8192, 16).endswith(f"run f32 {llama.url.rsplit(':', 1)[1]}")
    assert "LLAMA_SLOTS=4" in llama.command(8192, 16)
    with pytest.raises(SystemExit, match="name a server"):
        servers(build_parser().parse_args([]))
