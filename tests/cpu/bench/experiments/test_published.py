"""The stated GPU roofline against published Qwen3-8B measurements (bench.experiments.published)."""

from __future__ import annotations

import pytest

from bench.experiments.published import (
    PUBLISHED,
    REFERENCE_HARDWARE,
    TOLERANCE,
    Comparison,
    Published,
    compare,
    markdown,
    modelled,
)
from bench.sim.costmodel import StepLoad, prefill_time
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel

CHECKED = [c for c in compare() if not c.published.dropped]


def _id(c: Comparison) -> str:
    return f"{c.published.gpu}-{c.published.point}"


@pytest.mark.parametrize("row", CHECKED, ids=_id)
def test_modelled_within_tolerance_of_published(row: Comparison) -> None:
    p = row.published
    assert abs(row.ratio - 1) <= TOLERANCE, (
        f"{p.point} on {p.gpu}: modelled {row.modelled:.4g} s vs published {p.value:.4g} s "
        f"(x{row.ratio:.2f}); source: {p.source}"
    )


def test_every_figure_is_sourced_and_evaluable() -> None:
    assert len(CHECKED) >= 6
    assert {c.published.batch for c in CHECKED} >= {8, 32, 128}
    seen = set()
    for p in PUBLISHED:
        assert p.model in QWEN3 and p.value > 0
        assert p.source and p.engine and p.notes and p.precision == "bf16"
        assert p.gpu in HARDWARE or (p.gpu in REFERENCE_HARDWARE and p.dropped), (
            "a GPU the simulator does not model can only give a reference figure"
        )
        key = (p.gpu, p.what, p.tokens, p.generated, p.batch, p.context, p.source)
        assert key not in seen
        seen.add(key)
        if p.what == "decode_step_s":
            assert p.batch > 0 and p.context > 0
        else:
            assert p.tokens > 0


def test_modelled_is_the_cost_model_on_the_same_point() -> None:
    c = GpuCostModel(QWEN3["qwen3-8b"], HARDWARE["h100"])
    dec = Published("qwen3-8b", "h100", "decode_step_s", 1.0, "s", "e", "n", batch=4, context=900)
    assert modelled(dec) == pytest.approx(float(c.step_time(StepLoad.of([], [900] * 4))))
    one = Published("qwen3-8b", "h100", "prefill_s", 1.0, "s", "e", "n", tokens=10_000)
    assert modelled(one) == pytest.approx(prefill_time(c, 10_000))
    chunked = Published(
        "qwen3-8b", "h100", "prefill_s", 1.0, "s", "e", "n", tokens=10_000, chunk=4096
    )
    parts = prefill_time(c, 4096, 0) + prefill_time(c, 4096, 4096) + prefill_time(c, 1808, 8192)
    assert modelled(chunked) == pytest.approx(parts)
    assert modelled(chunked) > modelled(one)  # two more steps' overhead and weight reads
    e2e = Published("qwen3-8b", "h100", "e2e_s", 1.0, "s", "e", "n", tokens=100, generated=3)
    decode = sum(float(c.step_time(StepLoad.of([], [k]))) for k in (100, 101))
    assert modelled(e2e) == pytest.approx(prefill_time(c, 100) + decode)


def test_dropped_figures_say_why_and_still_evaluate() -> None:
    dropped = [c for c in compare() if c.published.dropped]
    assert dropped  # the Qwen H20 table is kept for reference
    for c in dropped:
        assert len(c.published.dropped) > 40 and c.modelled > 0


def test_markdown_has_a_row_per_figure() -> None:
    table = markdown()
    assert table.count("\n") == len(PUBLISHED) + 1
    assert "ML.ENERGY" in table and "Qwen speed benchmark" in table
