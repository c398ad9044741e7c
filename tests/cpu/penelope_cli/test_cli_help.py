"""`penelope --help` everywhere: every option has help and shows its default.

Walks the parser tree that `penelope_cli.cli.main` builds (the top level
and `bench`), then each tool's own parser (`cli.tool_parser`), so an option
added without help anywhere fails here.
"""

from __future__ import annotations

import argparse
import re

import pytest

from penelope_cli.cli import BENCHES, COMMANDS, build_parser, main, tool_parser


def _subparsers(ap: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in ap._actions if isinstance(a, argparse._SubParsersAction)), None)


def _walk(ap: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser, its one-line help in the parent) for every stub under `ap`."""
    sub = _subparsers(ap)
    if sub is None:
        return
    lines = {c.dest: c.help for c in sub._choices_actions}
    for name, child in sub.choices.items():
        yield (*path, name), child, lines.get(name)
        yield from _walk(child, (*path, name))


STUBS = list(_walk(build_parser()))
LEAVES = [path for path, child, _ in STUBS if _subparsers(child) is None]


def _compact(text: str) -> str:
    return "".join(text.split())  # wrapping only moves whitespace


def _option_help(ap: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = ap.formatter_class(prog=ap.prog)
    formatter.add_argument(action)
    return formatter.format_help()


def _check_actions(ap: argparse.ArgumentParser) -> None:
    for action in ap._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help and action.help.strip(), f"{ap.prog}: {name} has no help"
        default = action.default
        if default is None or default is False or default is argparse.SUPPRESS:
            continue
        shown = _compact(_option_help(ap, action))
        assert f"(default:{_compact(str(default))}" in shown or (
            default == "" and "(default:empty)" in shown
        ), f"{ap.prog}: {name}'s help does not show its default {default!r}"


def test_the_tree_holds_every_tool() -> None:
    assert set(LEAVES) == {(n,) for n in COMMANDS} | {("bench", n) for n in BENCHES}


@pytest.mark.parametrize("path", [p for p, _, _ in STUBS], ids=" ".join)
def test_every_subcommand_has_a_one_line_help(path: tuple[str, ...]) -> None:
    line = next(line for p, _, line in STUBS if p == path)
    assert line and line.strip() and "\n" not in line, f"penelope {' '.join(path)}"


def test_top_level_and_bench_options_have_help() -> None:
    _check_actions(build_parser())
    for _, child, _ in STUBS:
        _check_actions(child)


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_every_option_has_help_and_shows_its_default(path: tuple[str, ...]) -> None:
    ap = tool_parser(*path)
    assert ap.prog == "penelope " + " ".join(path)
    _check_actions(ap)


@pytest.fixture(autouse=True)
def _terminal_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        rc = main(argv)
    except SystemExit as exit:
        rc = exit.code
    assert rc == 0
    return capsys.readouterr().out


def _listed(out: str, name: str, line: str) -> bool:
    """`name` starts a line of `out` and its one-line help follows on that line."""
    return re.search(rf"^ +{re.escape(name)} +{re.escape(line)}$", out, re.M) is not None


def test_penelope_help_lists_each_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(["--help"], capsys)
    lines = {path[0]: line for path, _, line in STUBS if len(path) == 1}
    assert set(lines) == {*COMMANDS, "bench"}
    for name, line in lines.items():
        assert _listed(out, name, line), f"{name!r} not listed with its help:\n{out}"


def test_penelope_bench_help_lists_each_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(["bench", "--help"], capsys)
    for name, (_, line) in BENCHES.items():
        assert _listed(out, name, line), f"{name!r} not listed with its help:\n{out}"


def test_a_tool_help_reaches_its_own_parser(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(["bench", "agree", "--help"], capsys)
    assert "--device-pages" in out and "(default: 160)" in out


def test_an_option_without_help_fails_the_check() -> None:
    ap = tool_parser("verify")
    ap.add_argument("--new-knob", type=int, default=3)
    with pytest.raises(AssertionError, match="--new-knob has no help"):
        _check_actions(ap)
    ap = argparse.ArgumentParser(prog="plain")  # help, but no shared formatter
    ap.add_argument("--knob", type=int, default=3, help="a knob")
    with pytest.raises(AssertionError, match="does not show its default"):
        _check_actions(ap)


def test_a_config_field_without_help_metadata_is_refused() -> None:
    import dataclasses

    from penelope_cli.helpformat import add_config_args

    @dataclasses.dataclass(frozen=True)
    class Knobs:
        size: int = dataclasses.field(default=3, metadata={"help": "how big"})
        speed: float = 1.0

    with pytest.raises(TypeError, match=r"Knobs\.speed has no help metadata"):
        add_config_args(argparse.ArgumentParser(), Knobs)


def test_config_options_take_their_help_from_field_metadata() -> None:
    import dataclasses

    from bench.load.cli import build_parser
    from bench.load.config import LoadConfig

    options = {a.dest: a.help for a in build_parser()._actions}
    for f in dataclasses.fields(LoadConfig):
        assert options[f.name] == f.metadata["help"]
