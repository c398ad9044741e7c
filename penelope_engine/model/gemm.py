"""Linear layers' products, one strategy per weight format (`WEIGHT_FORMATS`).

`PackedLinear` (``float``): oneDNN over a pre-packed copy for every float32 CPU
product of two rows or more, and bf16 prefill products widened to float32 where the
CPU has no bf16 arithmetic (`widen`). `Int8Linear` (``int8``): decode steps through
torch's weight-only int8 kernel, prefill in the model dtype over the values those
int8 weights stand for.

MKL's sgemm streams a ``[out, in]`` weight at a few GB/s when the batch has
a handful of rows (a decode step), against twice that for a matrix-vector
product; oneDNN over a weight re-laid once in its blocked format reads it
about 1.4x faster at 8 rows. At prefill sizes, on an AMD EPYC with AVX-512
(Zen 5), MKL takes its AVX2 path and oneDNN's own kernels run 2-2.9x faster
(SmolLM2's shapes at 1,024 rows, docs/results.md 3.9). So every product of
2 rows or more takes the packed copy: a prefill chunk, a fused recompute and
a decode batch alike. The packed product gives a row the same value whatever
the row count beside it (from 2 rows; the tests check it), so a recomputed
hole's KV and logits match the full prefill's. One row stays MKL's
matrix-vector product (already as fast as the weight streams).

oneDNN builds and keeps a primitive (with its scratch buffers) per row count
it meets, so a server seeing every prefill length would grow by hundreds of
MiB. `packed_rows` bounds the row counts it sees: up to `EXACT_ROWS` as they
come (decode batches), above that padded with zero rows up to a multiple of
`ROW_BUCKET`, and cut into slices of at most `MAX_ROWS`. The padding costs
at most `ROW_BUCKET - 1` rows a product and changes no real row's value
(row-invariance again): 47 row counts per weight shape in all.

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

PACK_HINT = 8  # the batch size oneDNN lays the weight out for (it serves any row count)
EXACT_ROWS = 32  # products of up to this many rows reach oneDNN as they are
ROW_BUCKET = 128  # larger ones are padded up to a multiple of this many rows
MAX_ROWS = 2048  # and cut into slices of at most this many


def packed_rows(rows: int) -> list[int]:
    """The row counts oneDNN sees for a product of `rows` rows (2 or more): one per slice."""
    if rows <= EXACT_ROWS:
        return [rows]
    whole, rest = divmod(rows, MAX_ROWS)
    tail = [] if rest == 0 else [max(EXACT_ROWS + 1, -(-rest // ROW_BUCKET) * ROW_BUCKET)]
    return [MAX_ROWS] * whole + [min(t, MAX_ROWS) for t in tail]


def available() -> bool:
    return bool(torch.backends.mkldnn.is_available()) and hasattr(
        torch.ops.mkldnn, "_reorder_linear_weight"
    )


_AVAILABLE = available()


def _onednn(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")  # noqa: SLF001 - torch: oneDNN's packed linear


class PackedLinear:
    """``F.linear(x, weight)``; through oneDNN's packed weight for float32 CPU rows, 2 or
    more; in float32 for `WIDEN_ROWS` or more rows of a prefill step whose dtype this CPU
    only emulates (`widen`)."""

    __slots__ = ("_key", "_packed", "enabled")

    def __init__(self, enabled: bool = True) -> None:
        self._key: tuple[int, int, torch.dtype] | None = None
        self._packed: torch.Tensor | None = None
        self.enabled = enabled and _AVAILABLE

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, decode: bool) -> torch.Tensor:
        if not decode and x.shape[0] >= WIDEN_ROWS and widens(weight):
            return F.linear(x.float(), weight.float()).to(x.dtype)
        if x.shape[0] < 2 or x.dim() != 2:
            return F.linear(x, weight)
        packed = self.packed(weight)
        if packed is None:
            return F.linear(x, weight)
        x = x.contiguous()
        parts = []
        start = 0
        for padded in packed_rows(x.shape[0]):
            part = x[start : start + padded]
            real = part.shape[0]
            if real < padded:
                part = F.pad(part, (0, 0, 0, padded - real))
            parts.append(_onednn(part, packed)[:real])
            start += real
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def prepare(self, weight: torch.Tensor) -> None:
        """Make the packed copy of `weight` now, not at a first step."""
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

    Prefill chunks and fused recomputes are compute-bound: they run the float
    product (`PackedLinear`) in the model dtype over the module's own weight,
    which `quantize` overwrote with the int8 values times their scale (exact in
    float32). So holes are recomputed
    exactly as a float model recomputes them (`penelope verify` holds them to the
    same tolerance), and a returning turn's KV matches a full prefill's. Decode rows
    differ from a float32 product by the bfloat16 rounding of their inputs, as
    `PackedLinear`'s decode rows differ from MKL's by summation order; the int8
    kernel gives each row the same value whatever the row count (the tests check
    it), so a decode row does not depend on what shares its step.
    """

    __slots__ = ("_float", "_key", "_q", "_scales")
    ROWS = torch.bfloat16  # the kernel's fast path takes bfloat16 rows and scales

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._q: torch.Tensor | None = None
        self._scales: torch.Tensor | None = None
        self._float = PackedLinear()  # prefill rows: the float product over q * scale

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
        self._float.prepare(weight)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, decode: bool) -> torch.Tensor:
        if not decode or x.dim() != 2:
            return self._float(x, weight, decode)
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
