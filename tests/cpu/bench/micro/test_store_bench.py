"""The store benchmark runs end to end and reports every figure, on tiny sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.micro.store_bench import main, run_store_bench


def test_run_store_bench_reports_each_size(tmp_path: Path) -> None:
    result = run_store_bench(tmp_path, sizes=(64 << 10, 256 << 10), repeats=1)
    assert [row["size_mib"] for row in result["segments"]] == [0.062, 0.25]
    for row in result["segments"]:
        for name in ("write_gbps", "read_gbps", "raw_copy_gbps", "raw_write_gbps", "read_vs_raw"):
            assert row[name] > 0
    assert list(tmp_path.iterdir()) == []  # cleans up after itself


def test_main_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--json", "--dir", str(tmp_path), "--sizes-mib", "0.125", "--repeats", "1"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["segments"][0]["size_mib"] == 0.125


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="repeats"):
        run_store_bench(tmp_path, sizes=(1 << 20,), repeats=0)
