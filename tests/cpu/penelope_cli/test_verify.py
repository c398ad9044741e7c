"""`penelope verify`'s checks: a NaN fails, the engine check forms holes and tier loads and is
exact, and transformers agrees with our logits on the tiny Qwen3."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from penelope_cli import closeness, verify, verify_fused
from penelope_cli.verify_engine import hf_from_state_dict, run_engine, run_reference
from penelope_engine.model.registry import LoadedModel
from penelope_engine.tiers.copies import TorchTiers

pytestmark = pytest.mark.slow
PS = 16


def test_worst_and_max_abs_diff_keep_a_nan() -> None:
    nan = float("nan")
    assert not math.isnan(max(0.1, nan, 0.2))  # Python's max drops it: the bug fixed here
    assert math.isnan(closeness.worst([0.1, nan, 0.2])) and closeness.worst([0.1, 0.3]) == 0.3
    a = torch.zeros(4)
    b = a.clone()
    b[2] = nan
    assert math.isnan(closeness.max_abs_diff(a, b)) and math.isnan(closeness.max_abs_diff(b, a))
    assert (
        closeness.max_abs_diff(a, a) == 0.0
        and closeness.max_abs_diff(a, torch.zeros(3)) == math.inf
    )
    assert not closeness.passes(nan, 1e-4) and closeness.passes(0.0, 1e-4)
    assert verify.jsonable({"d": nan, "l": [math.inf, 1.0]}) == {"d": "nan", "l": ["inf", 1.0]}


def _poison_fused(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The fused pass (each case's second forward) leaves a NaN in its KV or its logits."""
    forward, calls = verify_fused._forward, [0]

    def poisoned(lm, pool, seq, positions, chunks, first, attention):
        logits = forward(lm, pool, seq, positions, chunks, first, attention)
        calls[0] += 1
        if calls[0] % 2 == 0:
            if where == "kv":
                pool.v[-1][0, 0, 0] = float("nan")  # slot 0 holds some position's KV
            else:
                logits[0, 0] = float("nan")
        return logits

    monkeypatch.setattr(verify_fused, "_forward", poisoned)


@pytest.mark.parametrize("where", ["kv", "logits"])
def test_a_nan_in_the_fused_pass_fails_the_case(
    where: str, monkeypatch: pytest.MonkeyPatch, tiny_qwen3: LoadedModel
) -> None:
    clean = verify_fused.run_fused(tiny_qwen3, 2, PS, 0, "float32", "cpu", 1e-4)
    assert clean["ok"] and clean["max_abs_diff"] <= 1e-4
    _poison_fused(monkeypatch, where)
    r = verify_fused.run_fused(tiny_qwen3, 2, PS, 0, "float32", "cpu", 1e-4)
    assert math.isnan(r["max_abs_diff"]) and r["failed_cases"] == 2 and r["ok"] is False


def test_a_nan_reads_nan_in_the_json_and_fails_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tiny_qwen3: LoadedModel
) -> None:
    monkeypatch.setattr(verify, "load_model", lambda *a: tiny_qwen3)
    _poison_fused(monkeypatch, "kv")
    assert verify.main(["--cases", "1", "--sessions", "0", "--json"]) == 1
    r = json.loads(capsys.readouterr().out)  # strict JSON: no bare NaN
    assert r["max_abs_diff"] == "nan" and r["fused"]["max_abs_diff"] == "nan"
    assert r["ok"] is False and r["cases"] == 1


@pytest.fixture(scope="module")
def engine_run(tiny_qwen3: LoadedModel) -> tuple[dict, list]:
    return run_engine(tiny_qwen3, "tiny-qwen3", "float32", "cpu", PS, 4, 4, 3, 0, 1e-4)


def test_the_engine_check_forms_holes_and_tier_loads_and_is_exact(engine_run) -> None:
    report, turns = engine_run
    assert report["ok"] and report["tokens_exact"] and not report["mismatched_turns"]
    assert report["turns"] == len(turns) == 16
    assert report["turns_with_holes"] > 0
    assert report["turns_with_host_loads"] > 0 and report["turns_with_store_loads"] > 0
    tokens = report["tokens"]
    assert tokens["recomputed"] > 0 and tokens["host"] > 0 and tokens["store"] > 0
    assert 0.0 <= report["max_abs_diff"] <= 1e-4
    for seq, prompt_len, rows in turns:  # the tap saw the row behind every greedy token
        assert [int(r.argmax()) for r in rows] == seq[prompt_len:]


def test_the_engine_check_catches_a_host_load_that_copies_nothing(
    monkeypatch: pytest.MonkeyPatch, tiny_qwen3: LoadedModel
) -> None:
    monkeypatch.setattr(TorchTiers, "host_to_device", lambda self, host, device: True)
    report, _ = run_engine(tiny_qwen3, "tiny-qwen3", "float32", "cpu", PS, 4, 4, 3, 0, 1e-4)
    assert report["turns_with_host_loads"] > 0
    assert not report["ok"]
    assert report["mismatched_turns"] or report["max_abs_diff"] > 1e-4


@pytest.fixture(scope="module")
def hf_tiny(tiny_qwen3: LoadedModel) -> torch.nn.Module:
    return hf_from_state_dict(tiny_qwen3)


def test_transformers_matches_the_tiny_qwen3_within_1e4(
    engine_run, hf_tiny: torch.nn.Module, tiny_qwen3: LoadedModel
) -> None:
    _, turns = engine_run
    r = run_reference(tiny_qwen3, "tiny-qwen3", PS, turns[:6], 1e-4, lambda *_: hf_tiny)
    assert r["ok"] and r["max_abs_diff"] <= 1e-4 and r["argmax_agreement"] == 1.0
    assert r["sequences"] == 6 and r["positions"] > 6 * 3
    random = verify.random_sequences(tiny_qwen3, PS, 0)
    r = run_reference(tiny_qwen3, "tiny-qwen3", PS, random, 1e-4, lambda *_: hf_tiny)
    assert r["ok"] and r["argmax_agreement"] == 1.0


def test_the_reference_check_catches_a_different_model(
    engine_run, hf_tiny: torch.nn.Module, tiny_qwen3: LoadedModel
) -> None:
    other = copy.deepcopy(hf_tiny)
    with torch.no_grad():
        other.model.layers[0].mlp.down_proj.weight.mul_(1.01)
    r = run_reference(tiny_qwen3, "tiny-qwen3", PS, engine_run[1][:2], 1e-4, lambda *_: other)
    assert not r["ok"] and r["max_abs_diff"] > 1e-4


def test_the_fused_pass_through_flex_matches_the_reference_prefill(
    tiny_qwen3: LoadedModel,
) -> None:
    """Holes on and off page boundaries, recomputed by FlexAttention over the page table,
    against a full prefill by the reference backend: within 1e-4, NaN-filled holes and all."""
    r = verify_fused.run_fused(tiny_qwen3, 6, PS, 3, "float32", "cpu", 1e-4, "flex")
    assert r["ok"] and r["failed_cases"] == 0 and r["max_abs_diff"] <= 1e-4


def test_verdict_is_a_tolerance_when_exact_and_the_stated_bound_otherwise() -> None:
    nan = float("nan")
    assert closeness.verdict(True, 5e-5, 1e-4, 9, 10, 0.5)["ok"]  # only the diff counts
    assert not closeness.verdict(True, 2e-4, 1e-4, 10, 10, 0.0)["ok"]
    bounded = closeness.verdict(False, 0.3, 1e-4, 100, 100, closeness.HALF_KL / 2)
    assert bounded["ok"] and bounded["bound"]["top1_at_least"] == closeness.HALF_TOP1
    assert not closeness.verdict(False, 0.3, 1e-4, 98, 100, 0.0)["ok"]  # top-1 below the bound
    assert not closeness.verdict(False, 0.3, 1e-4, 100, 100, 2 * closeness.HALF_KL)["ok"]
    assert not closeness.verdict(False, nan, 1e-4, 100, 100, 0.0)["ok"]
    logits = torch.randn(6, 50)
    assert closeness.agreement(logits, logits) == (6, 6, 0.0)
    flipped = logits.clone()
    flipped[0] = -flipped[0]
    agree, rows, kl = closeness.agreement(flipped, logits)
    assert (agree, rows) == (5, 6) and kl > 1.0


def test_int8_weights_recompute_holes_as_float_does_and_decode_within_the_bound() -> None:
    result = verify.verify("tiny-qwen3", cases=4, sessions=3, turns=3, max_tokens=3,
                           weights="int8")  # fmt: skip
    assert result["weights"] == "int8" and result["ok"], result
    fused, engine = result["fused"], result["engine"]
    assert "bound" not in fused and fused["max_abs_diff"] <= 1e-4 and fused["top1"] == 1.0
    assert engine["bound"]["kl_at_most"] == closeness.HALF_KL  # decode rows: bf16 inputs
    assert engine["turns_with_holes"] > 0


def test_cases_over_a_text_are_windows_of_its_tokens() -> None:
    import numpy as np

    text = np.arange(5000, 6000)
    case = verify_fused.draw_case(np.random.default_rng(0), 100, PS, 0, text)
    start = int(case.tokens[0]) - 5000
    assert np.array_equal(case.tokens, text[start : start + len(case.tokens)])
    with pytest.raises(ValueError, match="the text has 10 tokens"):
        verify_fused.draw_case(np.random.default_rng(0), 100, PS, 0, text[:10])
