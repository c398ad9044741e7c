"""Stand-in for torchvision.transforms.functional: any function name, failing if called."""

from torchvision._absent import absent
from torchvision.transforms import InterpolationMode


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    return absent(name)


__all__ = ["InterpolationMode"]
