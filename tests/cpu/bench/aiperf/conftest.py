"""aiperf's venv for these tests: skipped with the fix where it is missing, but failed under
CI (`make test` builds it first, so there a missing venv is a broken build, never a skip)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.aiperf import env


@pytest.fixture(scope="session")
def aiperf_python() -> Path:
    try:
        return env.python()
    except env.AiperfMissing as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))
