"""Stand-in for torchvision.transforms: only the names SGLang imports."""

import enum


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


from torchvision.transforms import functional, v2  # noqa: E402  (they import the enum above)

__all__ = ["InterpolationMode", "functional", "v2"]
