"""`Registry`: names to strategies, one error style for an unknown name."""

from __future__ import annotations

import pytest

from penelope_engine.errors import ConfigError, UnknownNameError
from penelope_engine.registry import Registry


def test_get_returns_what_was_added_in_order() -> None:
    r: Registry[int] = Registry("number", {"one": 1})
    r.add("two", 2)
    assert r.get("two") == 2 and r["one"] == 1
    assert list(r) == ["one", "two"] and r.names() == ("one", "two") and len(r) == 2
    assert "one" in r and "three" not in r


def test_unknown_name_lists_the_valid_ones_and_a_name_registers_once() -> None:
    r: Registry[int] = Registry("number", {"one": 1, "two": 2})
    with pytest.raises(UnknownNameError, match=r"unknown number 'three'; valid: one, two"):
        r.get("three")
    with pytest.raises(UnknownNameError):
        r.check("three")
    with pytest.raises(ConfigError, match="already registered"):
        r.add("one", 11)
    assert r.get("one") == 1  # the failed add changed nothing


def test_extended_leaves_the_original_alone() -> None:
    base: Registry[int] = Registry("number", {"one": 1})
    more = base.extended("number", {"two": 2})
    assert more.names() == ("one", "two") and base.names() == ("one",)
