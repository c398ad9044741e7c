"""`penelope bench claude-code`: skipped with the reason where node or Claude Code is missing;
otherwise the real CLI (`--bare`), twice in one session, against SmolLM2: both runs exit 0
with the model's reply printed and no unknown-model warning, and the second run is served
mostly from cache.

A passing bench takes about 15 s on a shared 2-core machine. Claude Code names no
temperature, and the bench's server samples such requests greedily
(`--default-temperature 0`): at temperature 1 SmolLM2 now and then rambled past the
output cap and Claude Code exited 1. So the run is repeatable, and it is run once.
Set PENELOPE_SKIP_CLAUDE_CODE=1 to skip it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.agent_cli.harness import MISSING_EXIT
from bench.claude_code.cli import claude_env, find_claude, main
from bench.claude_code.setups import SETUPS
from penelope_engine.model.gguf_loader import converted_dir, find_smollm2_gguf
from penelope_engine.model.tiny import tiny_qwen3_64k_config


def test_missing_claude_says_so_and_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--claude", "/nonexistent/claude"]) == MISSING_EXIT
    assert "/nonexistent/claude not found" in capsys.readouterr().err


def test_claude_code_is_told_each_served_models_real_window(tmp_path: Path) -> None:
    smollm2 = json.loads((converted_dir(find_smollm2_gguf()) / "config.json").read_text())
    windows = {
        "smollm2-135m": smollm2["max_position_embeddings"],
        "tiny-qwen3-64k": tiny_qwen3_64k_config().max_position,
    }
    for name, setup in SETUPS.items():
        env = claude_env("http://127.0.0.1:1", tmp_path, setup)
        assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == str(windows[name])
        assert env["ANTHROPIC_MODEL"] == env["ANTHROPIC_SMALL_FAST_MODEL"] == setup.model


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_claude_code_runs_in_one_session_exit_cleanly_and_hit_the_cache(
    tmp_path: Path,
) -> None:
    claude, why = find_claude()
    if claude is None:
        pytest.skip(why)
    if os.environ.get("PENELOPE_SKIP_CLAUDE_CODE") == "1":
        pytest.skip("PENELOPE_SKIP_CLAUDE_CODE=1")
    out = tmp_path / "claude-code.json"
    code = main(["--json", str(out), "--timeout-s", "500"])
    report = json.loads(out.read_text())
    assert report["ok"] and code == 0, report
    assert report["exit_codes"] == [0, 0]
    assert all(r["reply_printed"] and not r["unknown_model_warning"] for r in report["runs"])
    sessions = {r["session"] for r in report["requests"]}
    assert len(sessions) == 1 and None not in sessions  # --continue: the same session
    first, second = (r["requests"] for r in report["runs"])
    assert report["cached_tokens"][second[0]] >= 0.9 * report["shared_prefix_tokens"][second[0]]
    # run 2 resends run 1's whole prompt (system prompt, first question) before its own
    assert report["shared_prefix_tokens"][second[0]] >= report["prompt_tokens"][first[0]] - 16
