"""The prepared GPU check (`tests/gpu/run_gpu_checks.sh`) parses, and without CUDA says so
in one SKIP line and exits 0, so CI can hold it while only a lent GPU runs it whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "gpu" / "run_gpu_checks.sh"


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)


def test_without_cuda_it_skips_in_one_line_and_exits_0() -> None:
    if torch.cuda.is_available():  # pragma: no cover - a GPU machine runs the whole script
        pytest.skip("CUDA is here: the script runs every check")
    out = subprocess.run(
        ["bash", str(SCRIPT)],
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "gpu",
        "SKIP",
        "no",
        "CUDA",
        "device:",
        "run",
        "with",
        "--cpu-parts",
    ]
