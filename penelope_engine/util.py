"""Small helpers every layer may use. No torch, no imports above `errors`."""

from __future__ import annotations

from penelope_engine.errors import ConfigError


def cdiv(a: int, b: int) -> int:
    """Ceiling of a / b for integers, b > 0 (pages needed for `a` tokens, say)."""
    return -(-a // b)


def require(cond: bool, msg: str) -> None:
    """Raise ConfigError(msg) unless `cond`: the one check of every validated config."""
    if not cond:
        raise ConfigError(msg)
