"""A KV segment: consecutive pages of one path, with their KV bytes.

The store is agnostic of array libraries: the KV travels as raw bytes plus a
dtype name and a shape, so fp32, fp16 and bf16 (which numpy cannot name) all
round-trip bit for bit. A torch tensor ``t`` becomes a payload with
``t.contiguous().view(torch.uint8).numpy()`` and comes back with
``torch.frombuffer(seg.payload, dtype=...).view(seg.shape)``.

Pages are laid out as::

    page i:  hash page_hashes[i], tokens token_ids[i],
             covering positions [positions[i], positions[i] + len(token_ids[i]))
    page i+1 starts where page i ends (the pages are consecutive)
"""

from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import dataclass

import numpy as np

# Bytes per element of every dtype the store accepts.
DTYPE_SIZES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int8": 1,
    "uint8": 1,
}
_NUMPY_DTYPES = ("float64", "float32", "float16", "int64", "int32", "int8", "uint8")
_U64 = 1 << 64


class SegmentError(ValueError):
    """A segment is malformed (mismatched lengths, unknown dtype, payload of the wrong size)."""


def segment_key(namespace: str, tenant: str, page_hashes: tuple[int, ...]) -> str:
    """Content address of a segment: the same pages of the same tenant and model, the same key."""
    h = hashlib.blake2b(digest_size=16)
    for part in (namespace, tenant):
        raw = part.encode()
        h.update(len(raw).to_bytes(8, "little") + raw)
    h.update(np.asarray(page_hashes, dtype="<u8").tobytes())
    return h.hexdigest()


def _as_bytes_view(payload: memoryview) -> memoryview:
    view = memoryview(payload)
    if not view.c_contiguous:
        raise SegmentError("segment payload must be C-contiguous (call .contiguous() first)")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


@dataclass(frozen=True, eq=False)
class Segment:
    """Consecutive pages of one path of one tenant, with their KV bytes (read-only)."""

    namespace: str  # model fingerprint
    tenant: str
    page_hashes: tuple[int, ...]  # uint64 chained page hashes
    positions: tuple[int, ...]  # start position of each page
    token_ids: tuple[tuple[int, ...], ...]  # the tokens of each page
    dtype: str  # a DTYPE_SIZES name
    shape: tuple[int, ...]
    payload: memoryview  # the KV in C order; any C-contiguous buffer is accepted and viewed

    def __post_init__(self) -> None:
        object.__setattr__(self, "payload", _as_bytes_view(self.payload))
        for name in ("page_hashes", "positions", "shape"):
            object.__setattr__(self, name, tuple(int(x) for x in getattr(self, name)))
        object.__setattr__(
            self, "token_ids", tuple(tuple(int(t) for t in p) for p in self.token_ids)
        )
        self._check_pages()
        self._check_payload()

    def _check_pages(self) -> None:
        n = len(self.page_hashes)
        if n == 0:
            raise SegmentError("a segment needs at least one page")
        if len(self.positions) != n or len(self.token_ids) != n:
            raise SegmentError(
                f"page_hashes, positions and token_ids must have one entry per page; "
                f"got {n}, {len(self.positions)}, {len(self.token_ids)}"
            )
        if any(not 0 <= h < _U64 for h in self.page_hashes):
            raise SegmentError("page hashes must be unsigned 64-bit integers")
        if any(len(toks) == 0 for toks in self.token_ids):
            raise SegmentError("every page must hold at least one token")
        if self.positions[0] < 0:
            raise SegmentError(f"positions must be >= 0, got {self.positions[0]}")
        for i in range(n - 1):
            if self.positions[i + 1] != self.positions[i] + len(self.token_ids[i]):
                raise SegmentError(
                    f"pages must be consecutive: page {i} starts at {self.positions[i]} with "
                    f"{len(self.token_ids[i])} tokens, page {i + 1} at {self.positions[i + 1]}"
                )

    def _check_payload(self) -> None:
        if self.dtype not in DTYPE_SIZES:
            raise SegmentError(
                f"unknown dtype {self.dtype!r}; expected one of {sorted(DTYPE_SIZES)}"
            )
        if any(d < 0 for d in self.shape):
            raise SegmentError(f"shape must be non-negative, got {self.shape}")
        want = math.prod(self.shape) * DTYPE_SIZES[self.dtype]
        if self.payload.nbytes != want:
            raise SegmentError(
                f"payload holds {self.payload.nbytes} bytes but shape {self.shape} of "
                f"{self.dtype} needs {want}"
            )

    @property
    def key(self) -> str:
        return segment_key(self.namespace, self.tenant, self.page_hashes)

    @property
    def num_pages(self) -> int:
        return len(self.page_hashes)

    @property
    def nbytes(self) -> int:
        return self.payload.nbytes

    def page_index(self, page_hash: int) -> int:
        """Index of the page named `page_hash` in this segment (ValueError when absent)."""
        return self.page_hashes.index(page_hash)

    def to_numpy(self) -> np.ndarray:
        """A read-only numpy view of the payload (no copy); bf16 and fp8 come back as raw uint8."""
        if self.dtype not in _NUMPY_DTYPES:
            return np.frombuffer(self.payload, dtype=np.uint8)
        return np.frombuffer(self.payload, dtype=np.dtype(self.dtype)).reshape(self.shape)

    def same_content(self, other: Segment) -> bool:
        """True when both segments hold the same pages, tokens and KV bytes."""
        return self.checksum() == other.checksum() and self.payload == other.payload

    def checksum(self) -> str:
        """CRC32 over the header (names, pages, tokens, dtype, shape) and the payload."""
        crc = zlib.crc32(self.payload)
        return f"crc32:{zlib.crc32(self._header_bytes(), crc):08x}"

    def _header_bytes(self) -> bytes:
        lengths = [len(t) for t in self.token_ids]
        tokens = [t for page in self.token_ids for t in page]
        parts = [
            repr((self.namespace, self.tenant, self.dtype, self.shape)).encode(),
            np.asarray(self.page_hashes, dtype="<u8").tobytes(),
            np.asarray(self.positions, dtype="<i8").tobytes(),
            np.asarray(lengths, dtype="<i8").tobytes(),
            np.asarray(tokens, dtype="<i8").tobytes(),
        ]
        return b"".join(parts)
