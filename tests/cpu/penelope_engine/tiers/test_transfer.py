"""`PageMover` copies exactly the named pages, every layer, K and V, and nothing else.

On the CPU the same-device path runs; with CUDA (tests/gpu runs this module too)
the staged host -> device and device -> host paths run, including a second copy
larger than the first (the staging grows) and one smaller (it is reused).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from penelope_engine.model.tiny import tiny_qwen3_config
from penelope_engine.tiers.kv_pool import KVPool
from penelope_engine.tiers.transfer import PageMover

PAGE, PAGES = 4, 24
CONFIG = tiny_qwen3_config(vocab_size=64)


def filled(device: str, dtype: torch.dtype, seed: int) -> KVPool:
    pool = KVPool(CONFIG, PAGES, PAGE, dtype, device)
    g = torch.Generator().manual_seed(seed)
    for layer in range(pool.num_layers):
        pool.k[layer].copy_(torch.randn(pool.k[layer].shape, generator=g).to(dtype))
        pool.v[layer].copy_(torch.randn(pool.v[layer].shape, generator=g).to(dtype))
    return pool


def pages_of(pool: KVPool, pages: np.ndarray) -> torch.Tensor:
    """The KV of `pages` gathered token by token from the layout's definition (slot
    ``p * page_size + t``): an oracle independent of the page rows under test."""
    slots = torch.from_numpy(
        (pages[:, None] * pool.page_size + np.arange(pool.page_size)[None, :]).reshape(-1)
    )
    return torch.stack([torch.stack([t.cpu()[slots] for t in side]) for side in (pool.k, pool.v)])


def pairs() -> list[tuple[str, str]]:
    out = [("cpu", "cpu")]
    if torch.cuda.is_available():
        out += [("cpu", "cuda"), ("cuda", "cpu"), ("cuda", "cuda")]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("src_dev", "dst_dev"), pairs())
def test_copies_exactly_the_named_pages(src_dev: str, dst_dev: str, dtype: torch.dtype) -> None:
    src, dst = filled(src_dev, dtype, 1), filled(dst_dev, dtype, 2)
    cuda = "cuda" in (src_dev, dst_dev)
    mover = PageMover(torch.cuda.Stream() if cuda else None)
    untouched = np.arange(PAGES)
    for src_pages, dst_pages in [
        (np.array([3, 7, 1]), np.array([0, 5, 6])),  # scattered, out of order
        (np.arange(10, 20), np.arange(8, 18)[::-1].copy()),  # larger: the staging grows
        (np.array([2]), np.array([23])),  # smaller: the staging is reused
    ]:
        before_src = pages_of(src, np.arange(PAGES))
        mover.copy(src, src_pages, dst, dst_pages)
        assert torch.equal(pages_of(dst, dst_pages), pages_of(src, src_pages))
        assert torch.equal(pages_of(src, np.arange(PAGES)), before_src)  # the source is read only
        untouched = np.setdiff1d(untouched, dst_pages)
    fresh = filled(dst_dev, dtype, 2)
    assert torch.equal(pages_of(dst, untouched), pages_of(fresh, untouched))


def test_a_count_mismatch_is_refused_before_any_byte_moves() -> None:
    src, dst = filled("cpu", torch.float32, 1), filled("cpu", torch.float32, 2)
    before = pages_of(dst, np.arange(PAGES))
    with pytest.raises(ValueError, match="2 source pages for 1"):
        PageMover(None).copy(src, np.array([1, 2]), dst, np.array([3]))
    assert torch.equal(pages_of(dst, np.arange(PAGES)), before)


def test_no_pages_is_a_no_op() -> None:
    src, dst = filled("cpu", torch.float32, 1), filled("cpu", torch.float32, 2)
    before = pages_of(dst, np.arange(PAGES))
    PageMover(None).copy(src, np.array([], dtype=np.int64), dst, np.array([], dtype=np.int64))
    assert torch.equal(pages_of(dst, np.arange(PAGES)), before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_read_pages_and_write_pages_move_whole_pages_in_order(dtype: torch.dtype) -> None:
    src, dst = filled("cpu", dtype, 1), filled("cpu", dtype, 2)
    pages = np.array([5, 0, 17])
    k, v = src.read_pages(torch.from_numpy(pages))
    assert k.shape == v.shape == (src.num_layers, 3 * PAGE, *src.k[0].shape[1:])
    assert torch.equal(torch.stack([k, v]), pages_of(src, pages))
    before = pages_of(dst, np.arange(PAGES))
    dst.write_pages(torch.tensor([9, 2, 11]), k, v)
    assert torch.equal(pages_of(dst, np.array([9, 2, 11])), pages_of(src, pages))
    others = np.setdiff1d(np.arange(PAGES), [9, 2, 11])
    assert torch.equal(
        pages_of(dst, others),
        before[:, :, np.concatenate([np.arange(p * PAGE, (p + 1) * PAGE) for p in others])],
    )
