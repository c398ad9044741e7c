"""aiperf's venv holds the version bench/aiperf/requirements.txt pins, apart from ours."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.aiperf import env


def test_the_venv_holds_the_pinned_aiperf_and_is_not_ours(aiperf_python: Path) -> None:
    code = "from importlib.metadata import version; print(version('aiperf'))"
    assert env.run_python(code, [], 60).strip() == env.pinned_version() == "0.13.0"
    assert Path(sys.prefix).resolve() != aiperf_python.parents[1].resolve()


def test_a_missing_venv_names_the_command_that_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env.VENV_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(env.AiperfMissing, match="make aiperf"):
        env.python()
