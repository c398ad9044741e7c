"""`bench.speed.holes`: one hole turn, one tail turn and one decode step, timed in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.speed.holes import main, measure


def test_the_figure_names_its_shapes_and_times_each_forward() -> None:
    out = measure("tiny-qwen3", context=96, hole=32, hole_start=16, new=4, batch=2, repeats=1)
    assert (out["context"], out["hole"], out["hole_start"], out["new"]) == (96, 32, 16, 4)
    assert out["hole_s"] > 0 and out["tail_s"] > 0 and out["decode_s"] > 0
    # ratios of the unrounded times: the rounded ones agree to their last digits
    assert out["hole_over_tail"] == pytest.approx(out["hole_s"] / out["tail_s"], rel=0.02)
    assert out["decode_tok_s"] == pytest.approx(2 / out["decode_s"], rel=0.02)


def test_a_hole_outside_the_history_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="not inside"):
        main(["--model", "tiny-qwen3", "--context", "64", "--hole", "32", "--hole-start", "40"])
    out = tmp_path / "holes.json"
    argv = ["--model", "tiny-qwen3", "--context", "64", "--hole", "16", "--hole-start", "8",
            "--new", "2", "--batch", "1", "--repeats", "1", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(out.read_text())["model"] == "tiny-qwen3"


def test_backends_are_timed_one_after_another(tmp_path: Path) -> None:
    out = tmp_path / "holes.json"
    argv = ["--model", "tiny-qwen3", "--context", "64", "--hole", "16", "--hole-start", "8",
            "--new", "2", "--batch", "2", "--repeats", "1", "--attention", "pieces,flex",
            "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    runs = json.loads(out.read_text())
    assert [r["attention"] for r in runs] == ["pieces", "flex"]
    assert all(r["hole_s"] > 0 and r["decode_s"] > 0 for r in runs)
