"""`Registry`: names to strategies, one error style for an unknown name."""

from __future__ import annotations

import ast
from pathlib import Path

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


def test_the_configs_name_lists_are_the_registries_names() -> None:
    """Configs check strategy names against `options`' lists without importing the cache or
    the model; the registries there are the strategies: the two must name the same ones."""
    from penelope_engine.cache.eviction import EVICTION_POLICIES
    from penelope_engine.model.backends import ATTENTION_BACKENDS
    from penelope_engine.model.weight_formats import WEIGHT_FORMATS
    from penelope_engine.options import ATTENTION_NAMES, EVICTION_NAMES, WEIGHT_NAMES

    assert EVICTION_POLICIES.names() == EVICTION_NAMES
    assert ATTENTION_BACKENDS.names() == ATTENTION_NAMES
    assert WEIGHT_FORMATS.names() == WEIGHT_NAMES


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, type-checking-only imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize(
    ("modules", "rooms"),
    [
        (("config", "cache_config", "options", "protocol", "tokenizer"),
         ("model", "cache", "sched", "tiers")),
        (("model",), ("sched", "cache")),
    ],
)  # fmt: skip
def test_arrows_point_down_inside_the_engine(
    modules: tuple[str, ...], rooms: tuple[str, ...]
) -> None:
    """Config types, the protocol and the tokenizer import no room of the engine, and the model
    imports neither the scheduler nor the cache (not even for type checking)."""
    root = Path(__file__).resolve().parents[3] / "penelope_engine"
    files = [
        f for m in modules for f in ([root / f"{m}.py"] if (root / f"{m}.py").exists()
                                     else sorted((root / m).rglob("*.py")))
    ]  # fmt: skip
    assert files
    upward = {
        f"{f.relative_to(root)} -> {name}"
        for f in files
        for name in _imports(f)
        if any(name == f"penelope_engine.{r}" or name.startswith(f"penelope_engine.{r}.")
               for r in rooms)
    }  # fmt: skip
    assert not upward, sorted(upward)
