"""Fused recompute: holes plus new tokens in one pass equal a full prefill, in logits and KV.

|-- prefix (cached) --|-- hole (queries) --|-- suffix (cached) --|-- new (queries) --|
"""

from __future__ import annotations

import pytest
import torch
from model_testkit import random_ids, random_model, run_step, scattered_pages, small_configs

from penelope_engine.model.decoder import Decoder
from penelope_engine.model.paged_attention import context_slots
from penelope_engine.tiers.kv_pool import KVPool

PAGE = 4
POOL_PAGES = 32
LENGTH = 31  # 26 cached or hole tokens, then 5 new ones
CACHED = 26
CONFIGS = {cfg.arch: cfg for cfg in small_configs()}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model(request: pytest.FixtureRequest) -> Decoder:
    return random_model(CONFIGS[request.param], seed=2)


@pytest.fixture(scope="module")
def reference(model: Decoder) -> tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids, all-row logits and per-position K/V of one full prefill."""
    ids = random_ids(LENGTH, seed=11)
    table = torch.arange(8)
    kv = KVPool(model.config, POOL_PAGES, PAGE, torch.float32)
    logits = run_step(model, kv, [(ids, list(range(LENGTH)), table, LENGTH)])
    k, v = _kv_by_position(kv, table, LENGTH)
    return ids, logits, k, v


def _kv_by_position(kv: KVPool, table: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    slots = context_slots(table, n, PAGE)
    return torch.stack([k[slots] for k in kv.k]), torch.stack([v[slots] for v in kv.v])


def _punch_holes(kv: KVPool, table: torch.Tensor, holes: list[range]) -> None:
    """Overwrite the holes' KV with garbage, as if their pages had been evicted and reused."""
    gen = torch.Generator().manual_seed(99)
    slots = context_slots(table, LENGTH, PAGE)[[p for h in holes for p in h]]
    for layer in range(kv.num_layers):
        for pool in (kv.k[layer], kv.v[layer]):
            pool[slots] = 50 * torch.randn(pool[slots].shape, generator=gen)


def _fused_pass(
    model: Decoder, ids: list[int], holes: list[range], relocate: bool
) -> tuple[torch.Tensor, KVPool, torch.Tensor, list[int]]:
    kv = KVPool(model.config, POOL_PAGES, PAGE, torch.float32)
    table = scattered_pages(8, seed=5, pool_pages=16)
    run_step(model, kv, [(ids[:CACHED], list(range(CACHED)), table, CACHED)], all_logits=False)
    if relocate:  # page-aligned holes get fresh pages, never written before
        table = table.clone()
        for hole in holes:
            table[hole.start // PAGE : hole.stop // PAGE] = torch.arange(
                16 + hole.start // PAGE, 16 + hole.stop // PAGE
            )
    else:
        _punch_holes(kv, table, holes)
    queries = [p for h in holes for p in h] + list(range(CACHED, LENGTH))
    logits = run_step(model, kv, [([ids[p] for p in queries], queries, table, LENGTH)])
    return logits, kv, table, queries


@pytest.mark.parametrize(
    ("holes", "relocate"),
    [
        ([range(8, 16)], True),
        ([range(5, 13)], False),
        ([range(0, 4), range(12, 20)], True),
        ([range(3, 6), range(17, 22)], False),
    ],
    ids=["aligned-relocated", "unaligned", "two-holes-relocated", "two-holes-unaligned"],
)
def test_fused_pass_equals_full_prefill(
    model: Decoder, reference: tuple, holes: list[range], relocate: bool
) -> None:
    ids, ref_logits, ref_k, ref_v = reference
    logits, kv, table, queries = _fused_pass(model, ids, holes, relocate)
    torch.testing.assert_close(logits, ref_logits[queries], atol=1e-4, rtol=0)
    k, v = _kv_by_position(kv, table, LENGTH)
    torch.testing.assert_close(k, ref_k, atol=1e-4, rtol=0)
    torch.testing.assert_close(v, ref_v, atol=1e-4, rtol=0)


def test_fused_pass_shares_a_batch_with_other_sequences(model: Decoder, reference: tuple) -> None:
    """A fused sequence, a decoding one and a fresh prefill in one flat batch."""
    ids, ref_logits, _, _ = reference
    kv = KVPool(model.config, POOL_PAGES, PAGE, torch.float32)
    fused_table, other_table = torch.arange(0, 8), torch.arange(8, 16)
    run_step(
        model,
        kv,
        [
            (ids[:CACHED], list(range(CACHED)), fused_table, CACHED),
            (ids[:20], list(range(20)), other_table, 20),
        ],
    )
    _punch_holes(kv, fused_table, [range(4, 12)])
    queries = list(range(4, 12)) + list(range(CACHED, LENGTH))
    logits = run_step(
        model,
        kv,
        [
            ([ids[20]], [20], other_table, 21),
            ([ids[p] for p in queries], queries, fused_table, LENGTH),
            (ids[:7], list(range(7)), torch.arange(16, 18), 7),
        ],
    )
    torch.testing.assert_close(logits[0], ref_logits[20], atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[1 : 1 + len(queries)], ref_logits[queries], atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[1 + len(queries) :], ref_logits[:7], atol=1e-4, rtol=0)
