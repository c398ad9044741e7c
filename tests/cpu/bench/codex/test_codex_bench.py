"""`penelope bench codex`: skipped with the reason where node or the Codex CLI is missing;
otherwise the real CLI, twice in one session (`codex exec`, then `codex exec resume --last`),
each exiting 0 with the model's reply printed, and its second run served mostly from cache.

The run takes about 30 s on a 2-core machine (SmolLM2, two runs of one request each,
~1.8K prompt tokens); set PENELOPE_SKIP_CODEX=1 to skip it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.agent_cli.harness import MISSING_EXIT
from bench.codex.cli import find_codex, main


def test_missing_codex_says_so_and_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--codex", "/nonexistent/codex"]) == MISSING_EXIT
    assert "/nonexistent/codex not found" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_codex_runs_in_one_session_exit_0_and_hit_the_cache(tmp_path: Path) -> None:
    codex, why = find_codex()
    if codex is None:
        pytest.skip(why)
    if os.environ.get("PENELOPE_SKIP_CODEX") == "1":
        pytest.skip("PENELOPE_SKIP_CODEX=1")
    out = tmp_path / "codex.json"
    code = main(["--json", str(out), "--timeout-s", "300"])
    report = json.loads(out.read_text())
    assert code == 0 and report["ok"], report
    assert report["exit_codes"] == [0, 0]
    assert all(r["reply"] and r["reply_printed"] for r in report["runs"])
    sessions = {r["session"] for r in report["requests"]}
    assert len(sessions) == 1 and None not in sessions  # resume --last: the same session
    second = report["runs"][1]["requests"]
    assert report["cached_tokens"][second[0]] >= 0.9 * report["shared_prefix_tokens"][second[0]]
    assert report["shared_prefix_tokens"][second[0]] > 1000  # instructions and tools
