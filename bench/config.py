"""What every bench's config shares: `option`, a field with its `--help`, and the checks,
each raising ValueError that names the field and its value."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import field
from typing import Any


def option(default: Any, help_: str) -> Any:
    """A config field that is also a command-line option (`helpformat.add_config_args`)."""
    return field(default=default, metadata={"help": help_})


def positive(config: object, *names: str) -> None:
    """Each named field of `config` is > 0."""
    for name in names:
        if not getattr(config, name) > 0:
            raise ValueError(f"{name} must be positive, got {getattr(config, name)}")


def shares(config: object, *names: str) -> None:
    """Each named field of `config` is a share: in [0, 1]."""
    for name in names:
        if not 0 <= getattr(config, name) <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {getattr(config, name)}")


def one_of(config: object, name: str, choices: Collection[str]) -> None:
    """The named field of `config` is one of `choices`."""
    value = getattr(config, name)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
