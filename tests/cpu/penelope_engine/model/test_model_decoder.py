"""The paged decoder against the `transformers` reference forward (fp32, atol 2e-4)."""

from __future__ import annotations

import pytest
import torch
from model_testkit import (
    hf_logits,
    hf_reference,
    random_ids,
    random_model,
    run_step,
    scattered_pages,
    small_configs,
)

from penelope_engine.model.attention import build_metadata
from penelope_engine.tiers.kv_pool import KVPool

# Our products are oneDNN's (`gemm.PackedLinear`), HF's are MKL's: two float32 summation
# orders, whose logits differ by up to ~1.6e-4 on these models (0.2% of elements over 1e-4)
ATOL = 2e-4
PAGE = 4
POOL_PAGES = 40

CONFIGS = {cfg.arch: cfg for cfg in small_configs()}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request: pytest.FixtureRequest) -> tuple:
    model = random_model(CONFIGS[request.param], seed=1)
    return model, hf_reference(model)


def test_prefill_of_several_sequences_matches_hf(pair: tuple) -> None:
    model, hf = pair
    lengths = [37, 5, 20]
    seqs = [random_ids(n, seed=i) for i, n in enumerate(lengths)]
    tables = list(
        scattered_pages(sum(-(-n // PAGE) for n in lengths), 3, POOL_PAGES).split(
            [-(-n // PAGE) for n in lengths]
        )
    )
    kv = KVPool(model.config, POOL_PAGES, PAGE, torch.float32)
    logits = run_step(
        model, kv, [(ids, list(range(len(ids))), t, len(ids)) for ids, t in zip(seqs, tables)]
    )
    rows = logits.split(lengths)
    for ids, got in zip(seqs, rows):
        torch.testing.assert_close(got, hf_logits(hf, ids), atol=ATOL, rtol=0)


def test_batched_decode_steps_match_hf(pair: tuple) -> None:
    """Single-query steps of sequences with different context lengths share one padded call."""
    model, hf = pair
    prompts = [random_ids(n, seed=10 + n) for n in (9, 3, 14)]
    tables = list(scattered_pages(18, 4, POOL_PAGES).split(6))  # 6 pages = 24 tokens each
    kv = KVPool(model.config, POOL_PAGES, PAGE, torch.float32)
    run_step(model, kv, [(p, list(range(len(p))), t, len(p)) for p, t in zip(prompts, tables)])
    extra = [random_ids(4, seed=20 + i) for i in range(3)]
    for step in range(4):
        seqs = [
            ([e[step]], [len(p) + step], t, len(p) + step + 1)
            for p, e, t in zip(prompts, extra, tables)
        ]
        logits = run_step(model, kv, seqs)
        for i, (p, e) in enumerate(zip(prompts, extra)):
            ref = hf_logits(hf, p + e[: step + 1])[-1]
            torch.testing.assert_close(logits[i], ref, atol=ATOL, rtol=0)


def test_chunked_prefill_mixed_with_decode_matches_hf(pair: tuple) -> None:
    model, hf = pair
    long_ids, short_ids = random_ids(30, seed=5), random_ids(6, seed=6)
    long_pages, short_pages = torch.arange(0, 8), torch.arange(20, 23)
    kv = KVPool(model.config, POOL_PAGES, PAGE, torch.float32)
    run_step(
        model,
        kv,
        [
            (long_ids[:13], list(range(13)), long_pages, 13),
            (short_ids[:5], list(range(5)), short_pages, 5),
        ],
    )
    logits = run_step(
        model,
        kv,
        [
            (short_ids[5:], [5], short_pages, 6),
            (long_ids[13:], list(range(13, 30)), long_pages, 30),
        ],
    )
    torch.testing.assert_close(logits[0], hf_logits(hf, short_ids)[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(logits[1:], hf_logits(hf, long_ids)[13:], atol=ATOL, rtol=0)


def test_rope_tables_match_hf(pair: tuple) -> None:
    model, hf = pair
    positions = torch.tensor([0, 1, 17, 4095, model.config.max_position - 1])
    x = torch.zeros(1, positions.numel(), model.config.head_dim)
    ref_cos, ref_sin = hf.model.rotary_emb(x, positions[None])
    cos, sin = model.rotary.cos_sin(positions, torch.float32)
    torch.testing.assert_close(cos[:, 0], ref_cos[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(sin[:, 0], ref_sin[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_forward_tracks_fp32(dtype: torch.dtype) -> None:
    cfg = CONFIGS["qwen3"]
    ids = random_ids(24, seed=7)
    table = torch.arange(6)
    logits = {}
    for dt in (torch.float32, dtype):
        model = random_model(cfg, seed=1, dtype=dt)
        kv = KVPool(cfg, 8, PAGE, dt)
        logits[dt] = run_step(model, kv, [(ids, list(range(24)), table, 24)])
        assert logits[dt].dtype == torch.float32
    diff = (logits[dtype] - logits[torch.float32]).abs().max()
    assert diff < 0.05 * logits[torch.float32].abs().max()


def test_tied_embeddings_share_one_tensor() -> None:
    tied = random_model(CONFIGS["qwen3"])
    untied = random_model(CONFIGS["llama"])
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight
    assert tied.to(torch.bfloat16).lm_head.weight is tied.model.embed_tokens.weight


def test_metadata_errors_are_reported() -> None:
    model = random_model(CONFIGS["llama"])
    kv = KVPool(model.config, 4, PAGE, torch.float32)
    meta = build_metadata([[0, 1, 2]], [torch.arange(1)], [9], PAGE)
    with pytest.raises(ValueError, match="cannot hold"):
        model(torch.tensor([1, 2, 3]), meta, kv)
    with pytest.raises(ValueError, match="must both be"):
        model(torch.tensor([1, 2]), build_metadata([[0, 1, 2]], [torch.arange(1)], [3], PAGE), kv)
