"""The maps of the code stay true: every package's `__init__` map, README's package map
and docs/architecture.md name exactly the modules that exist (none missing, none extra).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "penelope_engine",
    "penelope_sglang",
    "cache_store",
    "router",
    "deployments",
    "bench",
    "penelope_cli",
)
# docs/architecture.md's table lists these packages module by module; the others by their
# own __init__.
MAPPED_PACKAGES = (*PACKAGES, *(f"penelope_engine/{room}" for room in ("cache", "sched", "tiers")))
MAP_DOC = "docs/architecture.md"


def packages() -> list[Path]:
    out = []
    for top in PACKAGES:
        out += sorted(p.parent for p in (ROOT / top).rglob("__init__.py"))
    return [p for p in out if "__pycache__" not in p.parts]


def members(pkg: Path) -> set[str]:
    """A package's modules (`name`) and subpackages (`name/`)."""
    mods = {p.stem for p in pkg.glob("*.py") if p.stem != "__init__"}
    subs = {f"{p.name}/" for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    return mods | subs


def init_map(pkg: Path) -> set[str]:
    """The names in the `Modules:` section of the package's `__init__` docstring."""
    doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""
    lines = doc.splitlines()
    if "Modules:" not in lines:
        raise AssertionError(f"{pkg.relative_to(ROOT)}/__init__.py has no 'Modules:' map")
    names = set()
    for line in lines[lines.index("Modules:") + 1 :]:
        if not line.strip():
            break
        if re.match(r"^\s{4}\S", line):  # a continuation is indented further
            names.add(line.split()[0])
    return names


@pytest.mark.parametrize("pkg", packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_init_maps_its_modules(pkg: Path) -> None:
    named, real = init_map(pkg), members(pkg)
    assert not named - real, f"{pkg.relative_to(ROOT)} map names missing modules {named - real}"
    assert not real - named, f"{pkg.relative_to(ROOT)} map omits {real - named}"


def doc_map() -> dict[str, set[str]]:
    """The "Package map" table of `MAP_DOC`: package -> the modules its rows name."""
    text = (ROOT / MAP_DOC).read_text()
    section = text.split("## Package map", 1)[1].split("\n## ", 1)[0]
    out: dict[str, set[str]] = {}
    current = None
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 3 or set(cells[0]) <= set("-") and cells[0] != "":
            continue
        if cells[0] in ("package",):
            continue
        if cells[0]:
            current = cells[0].strip("`").rstrip("/")
            out.setdefault(current, set())
        if current is not None:
            out[current] |= set(re.findall(r"`([A-Za-z_][\w]*/?)`", cells[1]))
    return out


def test_package_map_names_exactly_the_modules() -> None:
    table = doc_map()
    assert set(table) == set(MAPPED_PACKAGES), f"{MAP_DOC} map packages: {sorted(table)}"
    for pkg in MAPPED_PACKAGES:
        named, real = table[pkg], members(ROOT / pkg)
        assert not named - real, f"{MAP_DOC} names missing {pkg} modules {named - real}"
        assert not real - named, f"{MAP_DOC}'s map omits {pkg} modules {real - named}"


def top_level_names(source: Path) -> set[str]:
    """Names a module defines or imports at its top level."""
    names: set[str] = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def resolves(dotted: str) -> bool:
    """`a.b.c` is a module, or a name defined at the top of the longest module prefix."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        path = ROOT / Path(*parts[:i])
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if source.is_file():
            return i == len(parts) or parts[i] in top_level_names(source)
    return False


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_docs_name_only_modules_that_exist(doc: str) -> None:
    text = (ROOT / doc).read_text()
    refs = set(re.findall(rf"`((?:{'|'.join(PACKAGES)})(?:\.\w+)+)", text))
    refs |= {
        m.replace("/", ".").removesuffix(".py")
        for m in re.findall(rf"`((?:{'|'.join(PACKAGES)})/[\w/]+\.py)`", text)
    }
    missing = sorted(r for r in refs if not resolves(r))
    assert not missing, f"{doc} names what does not exist: {missing}"


def test_architecture_names_every_room_of_the_engine() -> None:
    text = (ROOT / "docs/architecture.md").read_text()
    rooms = {m for m in members(ROOT / "penelope_engine") if m.endswith("/")}
    absent = sorted(r for r in rooms if f"penelope_engine.{r[:-1]}" not in text)
    assert not absent, f"docs/architecture.md omits the engine's rooms {absent}"
