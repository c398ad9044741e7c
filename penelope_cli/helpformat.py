"""One help style for every `penelope` parser: each option says what it does and its default.

Every tool builds its parser with `parser(prog, __doc__)`, so `--help` reads
the same everywhere; tests/cpu/penelope_cli/test_cli_help.py holds each option to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to an option's help, except where X is None or False.

    None means the help says what happens instead ("default: a temp dir"), and
    a store_true flag is off unless given.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        if action.default == "" and action.option_strings:
            return f"{action.help or ''} (default: empty)"
        return super()._get_help_string(action) or ""

    def add_argument(self, action: argparse.Action) -> None:
        # argparse sizes the name column without the sub-commands' extra indent, which
        # pushes the help of a long one to the next line; count it, one line each.
        super().add_argument(action)
        if action.help is not argparse.SUPPRESS and hasattr(action, "_get_subactions"):
            names = [self._format_action_invocation(a) for a in action._get_subactions()]  # noqa: SLF001 - argparse: subcommands' names
            width = max(map(len, names), default=0)
            indent = self._current_indent + self._indent_increment
            self._action_max_length = max(self._action_max_length, width + indent)


def parser(prog: str, doc: str | None, **kwargs) -> argparse.ArgumentParser:
    """An ArgumentParser with the shared formatter; its description is `doc`'s first line."""
    description = doc.strip().split("\n")[0] if doc else None
    return argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=HelpFormatter, **kwargs
    )


def add_config_args(ap: argparse.ArgumentParser, config: type) -> None:
    """One `--field-name` option per field of the dataclass `config`, its default the
    field's and its help the field's `metadata["help"]` (a field without one is a
    TypeError). An int, float or str default gives that type; a tuple is shown and read
    as a comma list (the caller splits it); None reads a str."""
    import dataclasses

    defaults = config()
    for f in dataclasses.fields(config):
        help_ = f.metadata.get("help")
        if not help_:
            raise TypeError(f"{config.__name__}.{f.name} has no help metadata")
        default = getattr(defaults, f.name)
        kind = type(default) if isinstance(default, (int, float, str)) else str
        shown = ",".join(default) if isinstance(default, tuple) else default
        ap.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=shown, help=help_)


def add_field_args(
    ap: argparse.ArgumentParser,
    config: type,
    names: Sequence[str],
    *,
    defaults: Mapping[str, Any] | None = None,
    choices: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """One `--field-name` option per named field of the dataclass `config`: its help the
    field's `metadata["help"]` (a field without one is a TypeError), its type and choices
    from the annotation (a `Literal` gives its values; `X | None` reads an X; a bool is a
    flag), its default the field's unless `defaults` names another (what a command serves
    differs from a config's default), its choices `choices`' where given (a registry's)."""
    defaults, choices = defaults or {}, choices or {}
    hints = typing.get_type_hints(config, include_extras=False)
    by_name = {f.name: f for f in dataclasses.fields(config)}
    for name in names:
        f = by_name[name]
        help_ = f.metadata.get("help")
        if not help_:
            raise TypeError(f"{config.__name__}.{name} has no help metadata")
        default = defaults[name] if name in defaults else f.default
        flag = f"--{name.replace('_', '-')}"
        kind = _scalar(hints[name])
        if kind is bool:
            ap.add_argument(flag, action="store_true", default=default, help=help_)
            continue
        allowed = choices.get(name)
        if typing.get_origin(kind) is Literal:
            allowed, kind = allowed or typing.get_args(kind), str
        ap.add_argument(flag, type=kind, default=default, choices=allowed, help=help_)


def _scalar(hint: Any) -> Any:
    """`X | None` -> X; anything else as it is."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (Union, types.UnionType) and len(args) == 1:
        return args[0]
    return hint
