"""Test-only stand-in for torchvision (shared/sglang-cpu/README.md, step 3).

SGLang imports torchvision at import time for its multimodal processors; the
cache code under test never calls into it.
"""

from torchvision import io, transforms
from torchvision.transforms import InterpolationMode

__version__ = "0.0.0+penelope-stub"
__all__ = ["InterpolationMode", "io", "transforms"]
