"""Segment validation, content keys and the Arrow codec, in memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from cache_store import Segment, SegmentError, codec, segment_key


def make_segment(
    pages: int = 3,
    page_size: int = 4,
    dtype: str = "float32",
    first: int = 1,
    tenant: str = "t",
    namespace: str = "model-a",
) -> Segment:
    kv = torch.randn(2, pages * page_size, 3, generator=torch.Generator().manual_seed(first))
    kv = kv.to(getattr(torch, dtype))
    return Segment(
        namespace=namespace,
        tenant=tenant,
        page_hashes=tuple(range(first, first + pages)),
        positions=tuple(i * page_size for i in range(pages)),
        token_ids=tuple(tuple(range(i * page_size, (i + 1) * page_size)) for i in range(pages)),
        dtype=dtype,
        shape=tuple(kv.shape),
        payload=memoryview(kv.view(torch.uint8).numpy()),
    )


def roundtrip(seg: Segment) -> Segment:
    sink = pa.BufferOutputStream()
    codec.write(sink, codec.encode(seg))
    return codec.read_segment(pa.BufferReader(sink.getvalue()))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_codec_roundtrip_is_bit_exact(dtype: str) -> None:
    seg = make_segment(dtype=dtype)
    back = roundtrip(seg)
    assert back.same_content(seg)
    assert (back.page_hashes, back.positions, back.token_ids) == (
        seg.page_hashes,
        seg.positions,
        seg.token_ids,
    )
    assert (back.dtype, back.shape, back.key) == (dtype, seg.shape, seg.key)
    got = torch.frombuffer(bytearray(back.payload), dtype=getattr(torch, dtype)).view(back.shape)
    want = torch.frombuffer(bytearray(seg.payload), dtype=getattr(torch, dtype)).view(seg.shape)
    assert torch.equal(got, want)


def test_encoded_size_is_exact() -> None:
    batch = codec.encode(make_segment(pages=5))
    sink = pa.BufferOutputStream()
    codec.write(sink, batch)
    assert codec.encoded_size(batch) == len(sink.getvalue())


def test_to_numpy_views_numpy_dtypes_and_gives_bytes_for_bf16() -> None:
    f16 = make_segment(dtype="float16")
    assert f16.to_numpy().dtype == np.float16 and f16.to_numpy().shape == f16.shape
    bf16 = make_segment(dtype="bfloat16")
    assert bf16.to_numpy().dtype == np.uint8 and bf16.to_numpy().nbytes == bf16.nbytes


def test_key_is_content_addressed() -> None:
    seg = make_segment()
    assert seg.key == make_segment().key == segment_key("model-a", "t", seg.page_hashes)
    assert seg.key != make_segment(tenant="u").key
    assert seg.key != make_segment(namespace="model-b").key
    assert seg.key != make_segment(pages=2).key
    assert seg.page_index(seg.page_hashes[2]) == 2


def test_checksum_covers_tokens_and_payload() -> None:
    seg = make_segment(pages=2, page_size=2)
    other_tokens = Segment(
        seg.namespace,
        seg.tenant,
        seg.page_hashes,
        seg.positions,
        ((0, 1), (2, 9)),
        seg.dtype,
        seg.shape,
        seg.payload,
    )
    flipped = bytearray(seg.payload)
    flipped[5] ^= 1
    other_kv = Segment(
        seg.namespace,
        seg.tenant,
        seg.page_hashes,
        seg.positions,
        seg.token_ids,
        seg.dtype,
        seg.shape,
        memoryview(flipped),
    )
    assert len({seg.checksum(), other_tokens.checksum(), other_kv.checksum()}) == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"page_hashes": ()}, "at least one page"),
        ({"positions": (0,)}, "one entry per page"),
        ({"positions": (0, 5)}, "consecutive"),
        ({"page_hashes": (1, 1 << 64)}, "64-bit"),
        ({"dtype": "float128"}, "unknown dtype"),
        ({"shape": (2, 3)}, "needs"),
        ({"token_ids": ((1, 2), ())}, "at least one token"),
    ],
)
def test_invalid_segments_are_refused(change: dict, message: str) -> None:
    fields = dict(
        namespace="m",
        tenant="t",
        page_hashes=(1, 2),
        positions=(0, 2),
        token_ids=((1, 2), (3, 4)),
        dtype="float16",
        shape=(2, 2),
        payload=memoryview(bytes(8)),
    )
    fields.update(change)
    with pytest.raises(SegmentError, match=message):
        Segment(**fields)


def test_non_contiguous_payload_is_refused() -> None:
    arr = np.zeros((4, 4), dtype=np.float32)[:, ::2]
    with pytest.raises(SegmentError, match="contiguous"):
        Segment("m", "t", (1,), (0,), ((1,),), "float32", (4, 2), memoryview(arr))


def test_package_imports_nothing_of_ours_nor_torch() -> None:
    code = (
        "import sys, cache_store.store\n"
        "ours = {'penelope_engine', 'router', 'deployments', 'bench', 'torch'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & ours))"
    )
    repo = Path(codec.__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
