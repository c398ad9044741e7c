"""Callables that stand for torchvision functions the cache tests never call."""

from collections.abc import Callable


def absent(name: str) -> Callable[..., object]:
    def fail(*args: object, **kwargs: object) -> object:
        raise NotImplementedError(f"torchvision stand-in: {name} is not available in tests")

    fail.__name__ = name
    return fail
