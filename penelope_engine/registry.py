"""`Registry`: strategies chosen by name (eviction policies, routers, models, peers).

One small generic table: `add` registers a name once, `get` returns what it
names or raises `UnknownNameError` listing the valid names, and iteration
yields the names in registration order (what help texts and errors show).
No torch, no imports above `errors`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from penelope_engine.errors import ConfigError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names to strategies (classes or factories) of one kind, e.g. "eviction policy"."""

    def __init__(self, kind: str, entries: Mapping[str, T] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        for name, entry in (entries or {}).items():
            self.add(name, entry)

    def add(self, name: str, entry: T) -> T:
        """Register `entry` as `name`; a name is registered once."""
        if name in self._entries:
            raise ConfigError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        """What `name` names; `UnknownNameError` with the valid names otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            valid = ", ".join(self._entries)
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid: {valid}") from None

    def check(self, name: str) -> None:
        """Raise `UnknownNameError` unless `name` is registered."""
        self.get(name)

    def extended(self, kind: str, entries: Mapping[str, T]) -> Registry[T]:
        """A new registry with these entries after this one's (this one is unchanged)."""
        return Registry(kind, {**self._entries, **entries})

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        return iter(self._entries.items())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> T:
        return self.get(name)
