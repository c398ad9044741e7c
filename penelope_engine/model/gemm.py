"""Linear layers' products, one strategy per weight format (`WEIGHT_FORMATS`).

`PackedLinear` (``float``): oneDNN over a pre-packed copy for float32 decode batches,
and bf16 prefill products widened to float32 where the CPU has no bf16 arithmetic
(`widen`). `Int8Linear` (``int8``): decode steps through torch's weight-only int8
kernel, prefill in the model dtype over the values those int8 weights stand for.

MKL's sgemm streams a ``[out, in]`` weight at a few GB/s when the batch has
a handful of rows (a decode step), against twice that for a matrix-vector
product. oneDNN over a weight re-laid once in its blocked format reads it
about 1.4x faster at 8 rows. Only decode steps (one query per sequence)
take it: prefill chunks and fused recomputes keep MKL, so a recomputed
hole's KV and logits match the full prefill's as before (their rounding
is MKL's on both sides); a decoded token's rows differ from MKL's by
float32 rounding only (`penelope verify`'s engine check holds them to its
tolerance against a from-scratch run).

The packed copy is rebuilt whenever the weight changes (a loader copying
into it, a move, a cast): it is keyed by the weight's storage and version.
It is one more copy of every weight (for a tied vocabulary projection, of
the embedding too); `Decoder.prepare_decode` makes them all at start-up, so
a server's memory does not step up at its first batched decode.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from penelope_engine.model.widen import WIDEN_ROWS, widens
from penelope_engine.registry import Registry

SMALL_ROWS = 32  # decode batches of 2 .. SMALL_ROWS rows take the packed path
# (one row is MKL's matrix-vector product, already as fast as the weight streams)
PACK_HINT = 8  # the batch size oneDNN lays the weight out for


def available() -> bool:
    return bool(torch.backends.mkldnn.is_available()) and hasattr(
        torch.ops.mkldnn, "_reorder_linear_weight"
    )


_AVAILABLE = available()


class PackedLinear:
    """``F.linear(x, weight)``; through oneDNN's packed weight for a decode step's float32
    CPU batch of 2 to `SMALL_ROWS` rows; in float32 for `WIDEN_ROWS` or more rows of a
    prefill step whose dtype this CPU only emulates (`widen`)."""

    __slots__ = ("_key", "_packed", "enabled")

    def __init__(self, enabled: bool = True) -> None:
        self._key: tuple[int, int, torch.dtype] | None = None
        self._packed: torch.Tensor | None = None
        self.enabled = enabled and _AVAILABLE

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, decode: bool) -> torch.Tensor:
        if not decode:
            if x.shape[0] >= WIDEN_ROWS and widens(weight):
                return F.linear(x.float(), weight.float()).to(x.dtype)
            return F.linear(x, weight)
        if not 2 <= x.shape[0] <= SMALL_ROWS or x.dim() != 2:
            return F.linear(x, weight)
        packed = self.packed(weight)
        if packed is None:
            return F.linear(x, weight)
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, None, "none", [], "")  # noqa: SLF001 - torch: oneDNN's packed linear

    def prepare(self, weight: torch.Tensor) -> None:
        """Make the decode copy of `weight` now, not at a first decode step."""
        self.packed(weight)

    def packed(self, weight: torch.Tensor) -> torch.Tensor | None:
        """The packed copy of `weight` (made now if it is missing or stale); None when this
        weight takes MKL (disabled, not float32, not on the CPU)."""
        if not self.enabled or weight.device.type != "cpu" or weight.dtype != torch.float32:
            return None
        key = (weight.data_ptr(), weight._version, weight.dtype)  # noqa: SLF001 - torch: a weight's version counter
        if key != self._key or self._packed is None:
            with torch.inference_mode():
                self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_HINT)  # noqa: SLF001 - torch: oneDNN's weight packing
            self._key = key
        return self._packed


class Int8Linear:
    """Weight-only int8, one scale per output channel: decode steps read int8.

    Decode is bound by reading the weights. A decode step reads each weight once as
    int8 (a quarter of float32's bytes) through ``aten._weight_int8pack_mm``, which
    widens a block of it to float32 in registers, accumulates in float32 and scales
    once (AVX-512 on x86; other x86 CPUs run its scalar loop, slower than float32).
    Its rows go in as bfloat16 (the kernel's fast path) and come back in the model
    dtype.

    Prefill chunks and fused recomputes are compute-bound: they run `F.linear` in
    the model dtype over the module's own weight, which `quantize` overwrote with
    the int8 values times their scale (exact in float32). So holes are recomputed
    exactly as a float model recomputes them (`penelope verify` holds them to the
    same tolerance), and a returning turn's KV matches a full prefill's. Decode rows
    differ from a float32 product by the bfloat16 rounding of their inputs, as
    `PackedLinear`'s decode rows differ from MKL's by summation order; the int8
    kernel gives each row the same value whatever the row count (the tests check
    it), so a decode row does not depend on what shares its step.
    """

    __slots__ = ("_key", "_q", "_scales")
    ROWS = torch.bfloat16  # the kernel's fast path takes bfloat16 rows and scales

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._q: torch.Tensor | None = None
        self._scales: torch.Tensor | None = None

    def quantize(self, weight: torch.Tensor) -> None:
        """Round `weight` (``[out, in]``) to int8 per row and keep that copy; overwrite
        `weight` in place with what those values stand for, so that views of it (the q/k/v
        projections inside a fused qkv) and a tied embedding read them too."""
        with torch.inference_mode():
            wide = weight.detach().float()
            scales = (wide.abs().amax(dim=1) / 127.0).clamp_min(torch.finfo(torch.float32).tiny)
            scales = scales.to(self.ROWS)  # the kernel scales in this dtype
            q = torch.round(wide / scales.float().unsqueeze(1)).clamp_(-127, 127)
            weight.copy_(q * scales.float().unsqueeze(1))
            self._q = q.to(torch.int8).contiguous()
            self._scales = scales.contiguous()
            self._key = (weight.data_ptr(), weight._version)  # noqa: SLF001 - torch: a weight's version counter

    def prepare(self, weight: torch.Tensor) -> None:
        self._check(weight)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, decode: bool) -> torch.Tensor:
        if not decode or x.dim() != 2:
            return F.linear(x, weight)
        self._check(weight)
        assert self._q is not None and self._scales is not None
        rows = x.to(self.ROWS).contiguous()
        return torch.ops.aten._weight_int8pack_mm(rows, self._q, self._scales).to(x.dtype)  # noqa: SLF001 - torch: weight-only int8 matmul

    def _check(self, weight: torch.Tensor) -> None:
        key = (weight.data_ptr(), weight._version)  # noqa: SLF001 - torch: a weight's version counter
        if self._q is None or key != self._key:
            raise RuntimeError(
                "int8 weights changed or moved after quantization: call "
                "Decoder.use_weights again after loading or moving the model"
            )


# The weight formats by name (`options.Weights`): the product strategy each linear layer
# of a model gets.
WEIGHT_FORMATS: Registry[type[PackedLinear] | type[Int8Linear]] = Registry(
    "weights", {"float": PackedLinear, "int8": Int8Linear}
)


def int8_vectorized() -> bool:
    """Whether torch's int8 weight kernel has its vectorized (AVX-512) loop on this CPU;
    elsewhere on x86 it runs a scalar loop, slower than float32."""
    import platform

    if platform.machine().lower() in ("arm64", "aarch64"):
        return True
    return torch.backends.cpu.get_cpu_capability().startswith("AVX512")
