"""The cache keeps its own rules: no module outside `penelope_engine/cache/` reaches into
the cache's tree, placement or eviction heaps, or walks or locks its tree directly.

Which page lives on which tier is decided in `penelope_engine/cache/` alone; the
scheduler, the tiers, the engine, the deployments and the benchmarks ask
`PrefixCache` (its methods keep free + cached == total). An AST walk over every
package file outside the cache: `<...cache>.tree`, `.placement`, `.heaps`, and calls
of `iter_nodes` or `<tree>.lock(node, delta)`. A peer model's own `self.tree` is
not a cache's, so `.tree` counts only on an expression that names a cache.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "penelope_engine",
    "penelope_sglang",
    "router",
    "deployments",
    "cache_store",
    "penelope_cli",
    "bench",
)
OWNER = ROOT / "penelope_engine" / "cache"
CACHE_PARTS = {"tree", "placement", "heaps"}


def _names_a_cache(node: ast.expr) -> bool:
    """`cache`, `c`, `self.cache`, `engine.cache`, `prefix_cache`...: an expression that
    names a PrefixCache by the project's naming."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name == "c" or name.endswith("cache")


def reaches(source: str) -> list[tuple[int, str]]:
    """Lines of `source` that reach into a cache's parts, with what they reach."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.lstrip("_") in CACHE_PARTS:
            if _names_a_cache(node.value):  # private since issue 50: SLF001 flags them too
                found.append((node.lineno, f".{node.attr.lstrip('_')}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr == "iter_nodes":  # PageTree's walk over every node
                found.append((node.lineno, ".iter_nodes()"))
            if func.attr == "lock" and len(node.args) == 2:  # PageTree.lock(node, delta)
                found.append((node.lineno, ".lock(node, delta)"))
    return found


def package_files() -> list[Path]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    return [p for p in files if OWNER not in p.parents]


def test_no_module_outside_the_cache_reaches_into_it() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in package_files()
        for line, what in reaches(path.read_text())
    ]
    assert not offenders, "ask PrefixCache instead:\n" + "\n".join(offenders)


def test_the_check_sees_each_kind_of_reach() -> None:
    source = """
self.cache._tree.lock(leaf, +1)
self.cache.placement.set_host(node, idx, slots)
for node in cache.heaps.holders(tier):
    pass
nodes = list(engine.cache.tree.iter_nodes())
walk = tree.iter_nodes()
"""
    kinds = {what for _, what in reaches(source)}
    assert kinds == {".tree", ".placement", ".heaps", ".iter_nodes()", ".lock(node, delta)"}
    allowed = "cache.lock(node)\ncache.match(h)\nc.locked_nodes()\nself.tree.insert(p, r)\n"
    assert reaches(allowed) == []
    assert len(package_files()) > 100  # the walk sees the packages
