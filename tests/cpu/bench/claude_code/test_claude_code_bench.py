"""`penelope bench claude-code`: skipped with the reason where node or Claude Code is missing;
otherwise the real CLI, twice in one session, and its second run served mostly from cache.

The run takes about 3.5 minutes on a shared 2-core machine (two `claude -p` runs of four
requests each, ~12K prompt tokens each); set PENELOPE_SKIP_CLAUDE_CODE=1 to skip it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.claude_code.cli import MISSING_EXIT, find_claude, main


def test_missing_claude_says_so_and_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--claude", "/nonexistent/claude"]) == MISSING_EXIT
    assert "/nonexistent/claude not found" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_claude_code_runs_in_one_session_hit_the_cache(tmp_path: Path) -> None:
    claude, why = find_claude()
    if claude is None:
        pytest.skip(why)
    if os.environ.get("PENELOPE_SKIP_CLAUDE_CODE") == "1":
        pytest.skip("PENELOPE_SKIP_CLAUDE_CODE=1")
    out = tmp_path / "claude-code.json"
    code = main(["--json", str(out), "--timeout-s", "500"])
    report = json.loads(out.read_text())
    assert report["cache_ok"], report
    # `ok` needs both runs to exit 0 with the reply printed; the random model never ends its
    # turn (Claude Code exits 1), so here it says so rather than passing.
    clean = all(r["exit_code"] == 0 and r["reply_printed"] for r in report["runs"])
    assert report["ok"] == clean and code == (0 if clean else 1), report
    assert len(report["exit_codes"]) == 2 and all(r["requests"] for r in report["runs"])
    sessions = {r["session"] for r in report["requests"]}
    assert len(sessions) == 1 and None not in sessions  # --continue: the same session
    second = report["runs"][1]["requests"]
    assert report["cached_tokens"][second[0]] >= 0.9 * report["shared_prefix_tokens"][second[0]]
    assert report["shared_prefix_tokens"][second[0]] > 5000  # the system prompt and tools
