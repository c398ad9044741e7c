"""Set-up for the SGLang backend's tests (run in .venv-sglang, see pytest.ini).

The torchvision stand-in under stubs/ goes first on sys.path (SGLang imports
torchvision at import time; PyPI's builds do not load beside the CPU torch),
and SGLang's test kit is told to build its pools on the CPU.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "stubs"))
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_NUM_THREADS", "1")

if importlib.util.find_spec("sglang") is None:
    # Collected from another environment (the main .venv has no SGLang): nothing to run here.
    collect_ignore_glob = ["test_*.py"]
else:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _cpu_device() -> Iterator[None]:
    from sglang.test.kits.unified_radix_cache import fixtures

    with mock.patch.object(fixtures, "get_device", return_value="cpu"):
        yield
