"""One help style for every `penelope` parser: each option says what it does and its default.

Every tool builds its parser with `parser(prog, __doc__)`, so `--help` reads
the same everywhere; tests/cpu/penelope_cli/test_cli_help.py holds each option to it.
"""

from __future__ import annotations

import argparse


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
            names = [self._format_action_invocation(a) for a in action._get_subactions()]
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
