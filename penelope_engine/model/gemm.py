"""Linear layers on CPU: oneDNN over a pre-packed copy for decode batches, and bf16
prefill products widened to float32 where the CPU has no bf16 arithmetic (`widen`).

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
