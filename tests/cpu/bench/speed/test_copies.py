"""`bench.speed.copies` runs each path it names: the pools' copies both ways, and the real
engine's returns from the host and from the device (here on the CPU, tiny model)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.speed import copies


def test_the_bench_copies_both_ways_and_returns_from_each_tier(tmp_path: Path) -> None:
    args = ["--tokens", "64,128", "--repeats", "1", "--engine", "--engine-history", "1024"]
    assert copies.main([*args, "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "copies.json").read_text())
    assert (tmp_path / "copies.png").stat().st_size > 0
    assert not doc["roofline_meaningful"]  # no CUDA: the GB/s are the CPU's
    rows = {(r["copy"], r["tokens"]) for r in doc["pools"]}
    assert rows == {(c, t) for c in ("host_to_device", "device_to_host") for t in (64, 128)}
    assert all(r["seconds"] > 0 and r["first_s"] > 0 for r in doc["pools"])
    e = doc["engine"]
    for run in (e["host"], e["host"]["again"]):  # both returns loaded from the host
        assert run["host_tokens"] > 0 and run["load_s"] > 0
        assert run["device_tokens"] + run["host_tokens"] + run["new_tokens"] == 1024 + 256
    for run in (e["device"], e["device"]["again"]):  # the control kept everything
        assert run["host_tokens"] == 0 and run["device_tokens"] == 1024
