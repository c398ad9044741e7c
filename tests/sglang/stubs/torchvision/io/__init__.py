"""Stand-in for torchvision.io: the names SGLang imports, failing if called."""

import enum

from torchvision._absent import absent


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


decode_image = absent("decode_image")
decode_jpeg = absent("decode_jpeg")
