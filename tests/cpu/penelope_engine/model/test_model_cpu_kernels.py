"""The CPU's paged decode kernel equals the SDPA path it replaces, on every shape it takes."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from penelope_engine.model import cpu_kernels
from penelope_engine.model.attention import build_metadata
from penelope_engine.model.paged_attention import AttentionPlan, paged_attention


@pytest.fixture(scope="module", autouse=True)
def _built() -> Iterator[None]:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler here: attention keeps the SDPA path")
    assert cpu_kernels.available(), cpu_kernels.why_not()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the kernel runs where threads <= sequences: here, always
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim", "page"),
    [(9, 3, 64, 16), (4, 4, 16, 4), (8, 2, 128, 32), (6, 1, 8, 1)],
)
def test_decode_rows_over_scattered_pages_equal_sdpa(
    heads: int, kv_heads: int, dim: int, page: int
) -> None:
    gen = torch.Generator().manual_seed(heads * dim + page)
    lens = [1, page - 1 or 1, page, 3 * page + 1, 97]  # one key, partial and whole pages
    pages_each = [-(-n // page) for n in lens]
    pool_pages = sum(pages_each) + 5
    perm = torch.randperm(pool_pages, generator=gen)
    tables, at = [], 0
    for n in pages_each:
        tables.append(perm[at : at + n])
        at += n
    k = torch.randn(pool_pages * page, kv_heads, dim, generator=gen)
    v = torch.randn(pool_pages * page, kv_heads, dim, generator=gen)
    q = torch.randn(len(lens), heads, dim, generator=gen)
    meta = build_metadata([[n - 1] for n in lens], tables, lens, page)
    plan = AttentionPlan.build(meta, page, heads // kv_heads, torch.float32)
    got = paged_attention(q, k, v, plan)
    want = paged_attention(q, k, v, plan, kernels=False)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=0)


def test_decode_rows_beside_a_chunk_take_the_kernel_and_land_in_their_rows() -> None:
    gen = torch.Generator().manual_seed(3)
    page, heads, kv_heads, dim = 4, 6, 2, 16
    tables = [torch.arange(0, 8), torch.arange(8, 16), torch.arange(16, 24)]
    k = torch.randn(24 * page, kv_heads, dim, generator=gen)
    v = torch.randn(24 * page, kv_heads, dim, generator=gen)
    # a prefill chunk after cached keys between two decode rows
    meta = build_metadata([[20], list(range(10, 18)), [29]], tables, [21, 18, 30], page)
    q = torch.randn(10, heads, dim, generator=gen)
    plan = AttentionPlan.build(meta, page, heads // kv_heads, torch.float32)
    got = paged_attention(q, k, v, plan)
    torch.testing.assert_close(got, paged_attention(q, k, v, plan, kernels=False), atol=2e-6,
                               rtol=0)  # fmt: skip


def test_fewer_sequences_than_threads_stay_on_sdpa_which_splits_heads_too() -> None:
    page, heads, kv_heads, dim = 4, 6, 2, 16
    meta = build_metadata([[9]], [torch.arange(4)], [10], page)
    plan = AttentionPlan.build(meta, page, heads // kv_heads, torch.float32)
    q = torch.randn(1, heads, dim)
    k, v = torch.randn(16, kv_heads, dim), torch.randn(16, kv_heads, dim)
    torch.set_num_threads(2)
    try:  # one sequence, two threads: the SDPA path, bit for bit
        assert torch.equal(
            paged_attention(q, k, v, plan), paged_attention(q, k, v, plan, kernels=False)
        )
    finally:
        torch.set_num_threads(1)


def test_what_the_kernel_does_not_take_stays_on_sdpa() -> None:
    q = torch.zeros(2, 4, 64)
    k = torch.zeros(64, 2, 64)
    assert cpu_kernels.fits(q, k, 16)
    assert not cpu_kernels.fits(q.bfloat16(), k.bfloat16(), 16)  # float32 only
    assert not cpu_kernels.fits(torch.zeros(2, 4, 12), torch.zeros(64, 2, 12), 16)  # dim % 8
    assert not cpu_kernels.fits(q, k, 512)  # pages past the kernel's buffers


def test_a_kernel_built_for_this_cpu_is_reused_from_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PENELOPE_KERNEL_DIR", str(tmp_path))
    first = cpu_kernels._build()  # noqa: SLF001 (the build itself, outside the process cache)
    built = list(tmp_path.glob("paged_decode-*.so"))
    assert len(built) == 1 and first._name == str(built[0])
    stamp = built[0].stat().st_mtime_ns
    cpu_kernels._build()  # noqa: SLF001
    assert built[0].stat().st_mtime_ns == stamp  # loaded, not rebuilt
