"""Weight-only quantized linear layers: decode steps read small weights, prefill reads floats.

Decode is bound by reading the weights once a step; prefill chunks and fused
recomputes are bound by arithmetic. So a `QuantizedLinear` keeps two forms of
one set of values:

* the packed low-bit copy its `Codec` made, which a decode step's rows
  (bfloat16, the kernels' fast path) read through a torch library kernel,
  accumulating in float32, and come back in the model dtype;
* the module's own float weight, which `quantize` overwrites in place with what
  the low-bit values stand for, so that prefill rows, fused qkv / gate-up views
  and a tied embedding all see them, through the float product (`PackedLinear`).

Holes are therefore recomputed exactly as a float model recomputes them
(`penelope verify` holds them to its tolerance), and a returning turn's KV
matches a full prefill's. Decode rows differ from the float product by the
bfloat16 rounding of their inputs, scales and outputs (`penelope verify`'s
stated bound); each kernel gives a row the same value whatever the rows beside
it (the tests check it), so a decode row does not depend on what shares its step.

Codecs (`WEIGHT_FORMATS` names them):

* ``int8``: one scale per output channel, 127 steps each side of zero;
  ``aten._weight_int8pack_mm`` (a quarter of float32's bytes).
* ``int4``: groups of 32 inputs, each its own scale and offset over 16 levels
  (GGUF's Q4_1 layout: the group's minimum and maximum are levels 0 and 15, so
  the Q4_1 weights SmolLM2 ships in come back on the same levels);
  ``aten._weight_int4pack_mm_for_cpu`` (an eighth of float32's bytes). Every
  output count must divide by 16 and every input count by 32.

Both kernels are vectorized for AVX-512 on x86 (`vectorized`); elsewhere they run
scalar loops, slower than float32, and `Decoder.use_weights` says so.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass

import torch

from penelope_engine.model.gemm import PackedLinear
from penelope_engine.registry import Registry

ROWS = torch.bfloat16  # the kernels' fast path takes bfloat16 rows, scales and offsets


@dataclass(frozen=True)
class Packed:
    """A codec's low-bit copy of one weight: what its kernel reads."""

    data: torch.Tensor
    scales: torch.Tensor


class Int8Codec:
    """One scale per output channel: ``w = q * scale``, q in [-127, 127]."""

    name = "int8"

    def pack(self, wide: torch.Tensor) -> tuple[Packed, torch.Tensor]:
        """The packed copy of `wide` (``[out, in]`` float32) and the values it stands for."""
        scales = (wide.abs().amax(dim=1) / 127.0).clamp_min(torch.finfo(torch.float32).tiny)
        scales = scales.to(ROWS)  # the kernel scales in this dtype
        q = torch.round(wide / scales.float().unsqueeze(1)).clamp_(-127, 127)
        values = q * scales.float()[:, None]  # exact in float32
        return Packed(q.to(torch.int8).contiguous(), scales.contiguous()), values

    def product(self, rows: torch.Tensor, packed: Packed) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(rows, packed.data, packed.scales)  # noqa: SLF001 - torch: weight-only int8 matmul


class Int4Codec:
    """Groups of `GROUP` inputs: ``w = (q - 8) * scale + offset``, q in [0, 15], with
    scale = (max - min) / 15 and offset = min + 8 * scale of the group (Q4_1's levels)."""

    name = "int4"
    GROUP = 32
    OUT_MULTIPLE = 16  # the packing lays output channels in tiles of 16

    def pack(self, wide: torch.Tensor) -> tuple[Packed, torch.Tensor]:
        out, inp = wide.shape
        if inp % self.GROUP or out % self.OUT_MULTIPLE:
            raise ValueError(
                f"int4 weights need in_features divisible by {self.GROUP} and out_features "
                f"by {self.OUT_MULTIPLE}; this layer is [{out}, {inp}]"
            )
        groups = wide.view(out, inp // self.GROUP, self.GROUP)
        low, high = groups.amin(dim=2), groups.amax(dim=2)
        scale = ((high - low) / 15.0).clamp_min(torch.finfo(torch.float32).tiny).to(ROWS)
        offset = (low + 8.0 * scale.float()).to(ROWS)  # the kernel's zero point, per group
        s, z = scale.float()[..., None], offset.float()[..., None]
        q = torch.round((groups - z) / s + 8.0).clamp_(0, 15)
        values = ((q - 8.0) * s + z).view(out, inp)
        levels = q.view(out, inp).to(torch.int32)
        data = torch.ops.aten._convert_weight_to_int4pack_for_cpu(levels, 1)  # noqa: SLF001 - torch: int4 weight packing
        scales = torch.stack([scale.t(), offset.t()], dim=-1).contiguous()  # [in/G, out, 2]
        return Packed(data, scales), values

    def product(self, rows: torch.Tensor, packed: Packed) -> torch.Tensor:
        mm = torch.ops.aten._weight_int4pack_mm_for_cpu  # noqa: SLF001 - torch: weight-only int4 matmul
        return mm(rows, packed.data, self.GROUP, packed.scales)


Codec = Int8Codec | Int4Codec


class QuantizedLinear:
    """A linear layer whose decode rows read `codec`'s packed copy; the rest is float."""

    __slots__ = ("_float", "_key", "_packed", "codec")

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self._key: tuple[int, int] | None = None
        self._packed: Packed | None = None
        self._float = PackedLinear()  # prefill rows: the float product over the values

    @property
    def name(self) -> str:
        return self.codec.name

    def quantize(self, weight: torch.Tensor) -> None:
        """Pack `weight` (``[out, in]``) and overwrite it in place with what the packed
        values stand for, so that views of it (the q/k/v projections inside a fused qkv)
        and a tied embedding read them too."""
        with torch.inference_mode():
            self._packed, values = self.codec.pack(weight.detach().float())
            weight.copy_(values)
            self._key = (weight.data_ptr(), weight._version)  # noqa: SLF001 - torch: a weight's version counter

    def prepare(self, weight: torch.Tensor) -> None:
        self._check(weight)
        self._float.prepare(weight)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, decode: bool) -> torch.Tensor:
        if not decode or x.dim() != 2:
            return self._float(x, weight, decode)
        self._check(weight)
        assert self._packed is not None
        return self.codec.product(x.to(ROWS).contiguous(), self._packed).to(x.dtype)

    def _check(self, weight: torch.Tensor) -> None:
        key = (weight.data_ptr(), weight._version)  # noqa: SLF001 - torch: a weight's version counter
        if self._packed is None or key != self._key:
            raise RuntimeError(
                f"{self.name} weights changed or moved after quantization: call "
                "Decoder.use_weights again after loading or moving the model"
            )


Gemm = PackedLinear | QuantizedLinear  # a linear layer's product strategy

# The weight formats by name (`options.Weights`): a factory of each linear layer's product.
WEIGHT_FORMATS: Registry[Callable[[], Gemm]] = Registry(
    "weights",
    {
        "float": PackedLinear,
        "int8": lambda: QuantizedLinear(Int8Codec()),
        "int4": lambda: QuantizedLinear(Int4Codec()),
    },
)


def vectorized() -> bool:
    """Whether torch's int8 and int4 weight kernels have their vectorized (AVX-512) loops
    on this CPU; elsewhere on x86 they run scalar loops, slower than float32."""
    if platform.machine().lower() in ("arm64", "aarch64"):
        return True
    return torch.backends.cpu.get_cpu_capability().startswith("AVX512")
