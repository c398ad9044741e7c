"""Stand-in for torchvision.transforms.v2.functional: any function name, failing if called."""

from torchvision._absent import absent


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    return absent(name)
