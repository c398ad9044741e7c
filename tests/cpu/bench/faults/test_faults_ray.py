"""`penelope bench faults --short --app ray`: the store's faults against the Ray Serve
application (ingress, router, one engine replica), not only `penelope serve`. Each case
holds against the no-fault run through the same application: no 5xx, nothing lost or
hung, identical answers, the queue under its cap, RSS within 10 %, writes resumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PORT_BASE = 18360  # this worktree's range, apart from the bench's and the other test's
STORE_CASES = ("store_unreachable", "store_slow")  # store_full needs a tmpfs mount (root)
ROOT = Path(__file__).resolve().parents[4]
RUN_TIMEOUT_S = 900

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(RUN_TIMEOUT_S + 60)]


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The bench as a user runs it, in a process of its own (it is a Ray driver there)."""
    out = tmp_path_factory.mktemp("faults-ray") / "faults.json"
    cmd = [sys.executable, "-m", "penelope_cli.cli", "bench", "faults", "--short", "--app",
           "ray", "--cases", ",".join(STORE_CASES), "--port-base", str(PORT_BASE),
           "--json", str(out)]  # fmt: skip
    done = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.exists(), done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", STORE_CASES)
def test_a_store_fault_through_the_ray_app_loses_nothing(result: dict, case: str) -> None:
    (summary,) = [c for c in result["cases"] if c["case"] == case]
    assert summary["checks"] == {k: True for k in summary["checks"]}, summary
    assert summary["ttft"]["during"]["n"] > 0  # the load ran through the fault


def test_the_ray_app_served_and_felt_the_faults(result: dict) -> None:
    by = {c["case"]: c for c in result["cases"]}
    assert result["app"] == "ray" and by["baseline"]["compared"] > 0
    assert by["store_unreachable"]["degraded_seen"]  # the ingress's /ready said so
    assert not by["baseline"]["degraded_seen"]
    assert by["store_slow"]["read_timeouts"] > 0 or by["store_slow"]["degraded_seen"]
