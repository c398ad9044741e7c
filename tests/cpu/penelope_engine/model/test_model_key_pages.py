"""`KeyPages`: a page-at-a-time gather returns exactly the keys a slot-by-slot gather does."""

from __future__ import annotations

import torch

from penelope_engine.model.attention import GatherScratch, KeyPages, context_slots

PAGE, PAGES, KV_HEADS, DIM = 4, 32, 2, 8


def test_whole_pages_gathered_hold_each_sequence_s_keys_in_order() -> None:
    cache = torch.randn(PAGES * PAGE, KV_HEADS, DIM)
    gen = torch.Generator().manual_seed(0)
    tables = [torch.randperm(PAGES, generator=gen)[:n] for n in (3, 7, 1)]
    lens = [10, 27, 2]  # partial last pages; the longest sets the width
    keys = KeyPages.of(tables, lens, PAGE)
    got = keys.gather(cache)
    assert got.shape == (3, max(lens), KV_HEADS, DIM)
    for row, (table, n) in enumerate(zip(tables, lens)):
        want = cache.index_select(0, context_slots(table, n, PAGE))
        assert torch.equal(got[row, :n], want)


def test_a_table_longer_than_its_context_reads_only_the_pages_in_use() -> None:
    cache = torch.randn(PAGES * PAGE, KV_HEADS, DIM)
    table = torch.tensor([5, 9, 2, 30, 31])  # pages past the context: reserved, unwritten
    keys = KeyPages.of([table], [6], PAGE)
    assert keys.pages.tolist() == [5, 9]
    assert torch.equal(keys.gather(cache)[0], cache.index_select(0, context_slots(table, 6, PAGE)))


def test_a_scratch_gather_returns_the_same_keys_in_one_buffer_reused_layer_after_layer() -> None:
    gen = torch.Generator().manual_seed(1)
    tables = [torch.randperm(PAGES, generator=gen)[:n] for n in (3, 7)]
    keys = KeyPages.of(tables, [10, 27], PAGE)
    scratch = GatherScratch()
    seen = set()
    for _layer in range(3):
        cache = torch.randn(PAGES * PAGE, KV_HEADS, DIM)
        got_k = keys.gather(cache, scratch, "k")
        got_v = keys.gather(cache * 2, scratch, "v")
        assert torch.equal(got_k, keys.gather(cache))
        assert torch.equal(got_v, keys.gather(cache * 2))  # "v" did not overwrite "k"
        seen.add((got_k.data_ptr(), got_v.data_ptr()))
    assert len(seen) == 1  # every layer wrote into the same two buffers


def test_a_smaller_gather_reuses_the_larger_buffer_and_a_larger_one_grows_it() -> None:
    cache = torch.randn(PAGES * PAGE, KV_HEADS, DIM)
    scratch = GatherScratch()
    big = KeyPages.of([torch.arange(8)], [30], PAGE)
    small = KeyPages.of([torch.arange(8, 10)], [5], PAGE)
    first = big.gather(cache, scratch).data_ptr()
    got = small.gather(cache, scratch)
    assert got.data_ptr() == first
    assert torch.equal(got, small.gather(cache))
    bigger = KeyPages.of([torch.arange(16)], [64], PAGE)
    assert torch.equal(bigger.gather(cache, scratch), bigger.gather(cache))
    assert torch.equal(small.gather(cache, scratch), small.gather(cache))
