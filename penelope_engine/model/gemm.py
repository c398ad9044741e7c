"""The float product of a linear layer (``float`` in `weight_formats.WEIGHT_FORMATS`).

`PackedLinear`: oneDNN over a pre-packed copy for every float32 CPU product of two
rows or more, and bf16 prefill products widened to float32 where the CPU has no
bf16 arithmetic (`widen`). The quantized formats (`weight_formats`) run their
prefill rows through it too.

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
(row-invariance again): 47 row counts per weight shape in all, each primed by
`prepare` at start-up (SmolLM2: under a second), so memory is flat after.

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


ROW_COUNTS = (*range(2, EXACT_ROWS + 1), *range(ROW_BUCKET, MAX_ROWS + 1, ROW_BUCKET))
VOCAB_OUT = 16384  # a weight with more outputs is a vocabulary projection (`prepare`)
_PRIMED: set[tuple[int, ...]] = set()  # weight shapes whose primitives exist in this process


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
        """Make the packed copy of `weight` now, not at a first step, and oneDNN's primitive
        for every row count it will see (`ROW_COUNTS`, once per weight shape in this
        process): a server's memory steps up at start-up, not as new lengths arrive."""
        packed = self.packed(weight)
        if packed is None or (shape := tuple(weight.shape)) in _PRIMED:
            return
        # a vocabulary projection's rows are the logits rows, a decode step's count at most
        counts = ROW_COUNTS if shape[0] <= VOCAB_OUT else ROW_COUNTS[: EXACT_ROWS - 1]
        with torch.inference_mode():
            for rows in counts:
                _onednn(torch.zeros(rows, shape[1]), packed)
        _PRIMED.add(shape)

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
