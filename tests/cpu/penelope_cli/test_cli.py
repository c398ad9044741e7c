"""The `penelope` command's tools, run small: each must report a correct result."""

import json

import pytest

from penelope_cli.cli import main

pytestmark = pytest.mark.slow


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[0])


def test_verify_reports_ok(capsys):
    assert main(["verify", "--cases", "8", "--sessions", "3", "--turns", "3", "--json"]) == 0
    r = _json(capsys)
    assert r["ok"] and r["cases"] == 8 and r["max_abs_diff"] <= 1e-4
    assert r["fused"]["ok"] and r["fused"]["cases"] == 8 and r["fused"]["failed_cases"] == 0
    engine = r["engine"]
    assert engine["ok"] and engine["tokens_exact"] and engine["turns"] == 9
    assert engine["turns_with_holes"] > 0
    assert engine["turns_with_host_loads"] > 0 and engine["turns_with_store_loads"] > 0
    assert "reference" not in r


def test_verify_fails_on_impossible_tolerance(capsys):
    assert main(["verify", "--cases", "2", "--sessions", "0", "--tolerance", "-1", "--json"]) == 1
    r = _json(capsys)
    assert not r["ok"] and not r["fused"]["ok"] and "engine" not in r


def test_verify_against_transformers(capsys):
    argv = ["verify", "--cases", "0", "--sessions", "3", "--turns", "2", "--reference"]
    assert main([*argv, "transformers", "--json"]) == 0
    r = _json(capsys)
    assert r["ok"] and r["reference"]["ok"] and r["reference"]["argmax_agreement"] == 1.0
    assert r["reference"]["max_abs_diff"] <= 1e-4 and r["reference"]["sequences"] == 6


def test_unknown_command_and_bench_are_errors(capsys):
    assert main(["nope"]) == 2
    assert main(["bench", "nope"]) == 2
