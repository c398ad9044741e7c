"""`penelope bench steps` (issue 49's GPU benchmark) runs its code path on a CPU: every case
times the steps it names and sets each against the roofline of its own load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.sim.costmodel import StepLoad
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel
from bench.speed.steps import main

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("steps") / "steps.json"
    argv = ["--contexts", "8192", "--prefill", "8192", "--returning", "32768", "--hole",
            "8192", "--steps", "4", "--cpu-scale", "128", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    return json.loads(Path(out).read_text())


def test_every_case_ran_its_steps_and_is_set_against_the_roofline(result: dict) -> None:
    assert not result["roofline_meaningful"] and result["length_divisor"] == 128
    assert set(result["cases"]) == {"decode-b1-64", "decode-b4-64", "prefill-64",
                                    "return-256-hole-64"}  # fmt: skip
    for name, case in result["cases"].items():
        assert case["steps"] >= 1 and case["measured_s"] > 0, name
        assert case["fraction"] > 0 and case["roofline_s"] > 0, name


def test_decode_is_timed_on_steps_of_the_whole_batch(result: dict) -> None:
    """At least --steps pure decode steps of every sequence, priced as one token each at
    its context: the roofline of such a step is the cost model's for that load."""
    cost = GpuCostModel(QWEN3["qwen3-8b"], HARDWARE["h100"])
    for batch in (1, 4):
        case = result["cases"][f"decode-b{batch}-64"]
        assert case["batch"] == batch and case["steps"] >= 4
        per_step = case["roofline_s"] / case["steps"]
        lowest = cost.step_time(StepLoad(batch, batch, batch * 65, batch * 65, batch))
        assert per_step >= lowest * 0.99  # contexts only grow while it decodes


def test_the_returning_turn_recomputed_a_hole_and_its_new_tokens(result: dict) -> None:
    case = result["cases"]["return-256-hole-64"]
    assert case["recomputed_tokens"] > 0  # its oldest pages were evicted, and recomputed
    assert case["new_tokens"] >= 256 and case["device_tokens"] > 0
